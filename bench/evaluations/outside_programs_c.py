"""A third suite of outside programs: built with public JAX libraries that no corpus family,
other bench or training row uses, as their users write them. As in
`bench/evaluations/outside_programs_b2.py`, each builder returns a new function and abstract
arguments (parameters, optimizer, simulator and environment states and keys are arguments, not
captured constants); `OUTSIDE_FAMILIES` registers one family per builder (prefix `outside_c`),
its grid the sizes measured.

- jaxmarl: independent PPO on an MPE task, masked-action MLP rollouts of SMAX (against its
  heuristic enemy) and of Hanabi (legal moves).
- vbjax: a Montbrio network SDE feeding a BOLD monitor, a delayed Jansen-Rit network vmapped
  over couplings, an Adam fit of a network to a functional connectivity (grad through the SDE).
- flowMC: a rational-quadratic spline flow fit (Adam in scan), vmapped MALA chains, one local
  (MALA) + global (flow proposal) sampling round.
- jaxdf: a waveform inversion step (grad through a pseudo-spectral acoustic solver), Gray-Scott
  on finite-difference fields, a physics-informed Helmholtz MLP step.
- pyhf (jax backend, float32): a profile-likelihood scan, toy q_mu test statistics, vmapped
  damped-Newton fits with Hessian uncertainties.
- augmax: a SimCLR step on two augmented views, joint image/mask augmentation with a
  segmentation step.
- jax-cfd: finite-volume forced turbulence, batched pseudo-spectral turbulence, a 4D-Var style
  step (grad through the spectral solver).
- dinosaur: the Held-Suarez dry core, a temperature sensitivity (grad through the core),
  multi-layer shallow water on the sphere.
- equimo: ViT and ConvNeXt train steps, batched AttNet inference.
- mpax: a transport LP, vmapped knapsack LP relaxations, a QP efficient frontier (PDHG solvers).
- evojax: PGPE generations (cart-pole swing-up, SlimeVolley) with population rollouts.
- jax-cosmo: a cosmic-shear likelihood, a supernova likelihood grid.

Networks are plain jax.numpy MLPs or CNNs unless the library ships its own; optax supplies
optimizers. Left out: kfac-jax (its tracer fails on jax 0.10), cola-ml (its iterative solvers
always emit host callbacks), jwave and trajax (another jax or Python), navix (a MiniGrid like
xminigrid's). jaxdf 0.2.1 declares no dependencies; it needs plum-dispatch.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from _outside_common import KEY, apply_grads, clipped_surrogate, f32, gae, i32, mlp, mlp_init, shapes, train

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders


def _eqx_abstract(make, *args, **kwargs):
    """(abstract array leaves, static rest) of the equinox module `make(*args)`, never built."""
    import equinox as eqx

    module = eqx.filter_eval_shape(make, *args, **kwargs)
    return eqx.partition(module, lambda x: isinstance(x, jax.ShapeDtypeStruct))


def _cnn_init(key, channels, out):
    keys = jax.random.split(key, len(channels))
    convs = [jax.random.normal(k, (3, 3, a, b)) / np.sqrt(9 * a)
             for k, a, b in zip(keys[:-1], channels[:-1], channels[1:], strict=True)]
    return {"convs": convs, "head": mlp_init(keys[-1], (channels[-1], 256, out))}


def _cnn(params, images):
    """Strided 3x3 convolutions (NHWC), global average pooling, an MLP head."""
    x = images
    for kernel in params["convs"]:
        x = jax.nn.gelu(jax.lax.conv_general_dilated(x, kernel, (2, 2), "SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC")))
    return mlp(params["head"], x.mean((1, 2)), jax.nn.gelu)


def _sample(key, logits):
    """(action, log-probability) drawn from categorical `logits`."""
    action = jax.random.categorical(key, logits)
    return action, jnp.take_along_axis(jax.nn.log_softmax(logits), action[..., None], -1)[..., 0]


# ----------------------------------------------------------------------------------------- jaxmarl


def _jaxmarl(env_id: str, num_envs: int, **kwargs):
    """(env, abstract observations and states of `num_envs` reset envs)."""
    import jaxmarl

    env = jaxmarl.make(env_id, **kwargs)
    return env, jax.eval_shape(lambda: jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs)))


def _marl_step(env, key, state, actions):
    """A vmapped auto-resetting step of a jaxmarl env on per-agent action arrays [batch]."""
    keys = jax.random.split(key, jax.tree.leaves(state)[0].shape[0])
    return jax.vmap(env.step)(keys, state, actions)


def jaxmarl_mpe_ippo_update(env_id: str, num_envs: int, steps: int, hidden: int = 64):
    """Independent PPO on an MPE task: shared MLP actor-critic rollout in scan, GAE, Adam (jaxmarl)."""
    import optax

    env, (obs, state) = _jaxmarl(env_id, num_envs)
    agents = env.agents
    obs_dim = max(env.observation_space(a).shape[0] for a in agents)
    num_actions = env.action_space(agents[0]).n
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(3e-4))

    def stack_obs(obs):
        # agents observe vectors of different lengths: pad to one width, add a one-hot agent id
        padded = [jnp.pad(obs[a], ((0, 0), (0, obs_dim - obs[a].shape[-1]))) for a in agents]
        ids = jnp.broadcast_to(jnp.eye(len(agents)), (obs[agents[0]].shape[0], len(agents), len(agents)))
        return jnp.concatenate([jnp.stack(padded, 1), ids], -1)

    def heads(net, x):
        return mlp(net["pi"], x), mlp(net["v"], x)[..., 0]

    def loss_fn(net, traj, adv, targets):
        return clipped_surrogate(*heads(net, traj["obs"]), traj, adv, targets)

    def update(net, opt_state, state, obs, key):
        def step(carry, key):
            state, obs = carry
            k_act, k_step = jax.random.split(key)
            x = stack_obs(obs)
            logits, value = heads(net, x)
            action, logp = _sample(k_act, logits)
            obs, state, reward, done, _ = _marl_step(env, k_step, state,
                                                     {a: action[:, i] for i, a in enumerate(agents)})
            r = jnp.stack([reward[a] for a in agents], 1)
            d = jnp.broadcast_to(done["__all__"][:, None], r.shape)
            return (state, obs), dict(obs=x, action=action, logp=logp, value=value, reward=r, done=d)

        (state, obs), traj = jax.lax.scan(step, (state, obs), jax.random.split(key, steps))
        adv, targets = gae(traj["reward"], traj["value"], traj["done"], heads(net, stack_obs(obs))[1])
        net, opt_state, loss = apply_grads(opt, loss_fn, net, opt_state, traj, adv, targets)
        return net, opt_state, state, obs, loss

    in_dim = obs_dim + len(agents)
    net = shapes(lambda k: {"pi": mlp_init(k, (in_dim, hidden, hidden, num_actions)),
                             "v": mlp_init(jax.random.fold_in(k, 1), (in_dim, hidden, hidden, 1))})
    return update, (net, jax.eval_shape(opt.init, net), state, obs, KEY)


def jaxmarl_masked_rollout(env_id: str, num_envs: int, steps: int, scenario: str = "", hidden: int = 128):
    """Shared MLP policy over available actions (SMAX vs. heuristic enemy, or Hanabi) in scan (jaxmarl)."""
    if env_id == "HeuristicEnemySMAX":
        from jaxmarl.environments.smax import map_name_to_scenario

        env, (obs, state) = _jaxmarl(env_id, num_envs, scenario=map_name_to_scenario(scenario))
        available = env.get_avail_actions
    else:
        env, (obs, state) = _jaxmarl(env_id, num_envs)
        available = env.get_legal_moves
    agents = env.agents

    def rollout(net, state, obs, key):
        def step(carry, key):
            state, obs = carry
            k_act, k_step = jax.random.split(key)
            avail = jax.vmap(available)(state)
            mask = jnp.stack([avail[a] for a in agents], 1)
            logits = mlp(net, jnp.stack([obs[a] for a in agents], 1), jax.nn.relu)
            action, _ = _sample(k_act, jnp.where(mask > 0, logits, -1e9))
            obs, state, reward, done, _ = _marl_step(env, k_step, state,
                                                     {a: action[:, i] for i, a in enumerate(agents)})
            return (state, obs), (sum(reward[a] for a in agents), done["__all__"])

        (state, obs), (rewards, dones) = jax.lax.scan(step, (state, obs), jax.random.split(key, steps))
        return state, rewards.sum(0), dones.sum()

    sizes = (obs[agents[0]].shape[-1], hidden, hidden, env.action_space(agents[0]).n)
    return rollout, (shapes(mlp_init, sizes), state, obs, KEY)


# ------------------------------------------------------------------------------------------- vbjax


def _vbjax():
    """vbjax, imported without leaving its XLA_FLAGS (a host device count) in the environment."""
    import os

    flags = os.environ.get("XLA_FLAGS")
    import vbjax

    if flags is None:
        os.environ.pop("XLA_FLAGS", None)
    return vbjax


def _mpr_network(vb, weights, nodes):
    """Drift of a Montbrio-Pazo-Roxin network with linear rate coupling, parameters (eta, coupling)."""
    def dfun(x, p):
        c = jnp.stack([weights @ x[0], jnp.zeros(nodes)])
        return vb.mpr_dfun(x, c, vb.mpr_default_theta._replace(eta=p[0], cr=p[1]))

    return dfun


def vbjax_mpr_bold_network(nodes: int, chunks: int, chunk_len: int):
    """Montbrio-Pazo-Roxin whole-brain network SDE in chunks, each feeding an offline BOLD monitor (vbjax)."""
    vb = _vbjax()
    dt = 0.1

    def run(weights, x0, eta, coupling, key):
        _, loop = vb.make_sde(dt, _mpr_network(vb, weights, nodes), 0.02, adhoc=vb.mpr_r_positive)
        bold_buf, bold_step, bold_sample = vb.make_bold((nodes,), dt / 1e3 * 10, vb.bold_default_theta)
        offline = vb.make_offline(bold_step, bold_sample)

        def chunk(carry, key):
            x, bold_buf = carry
            xs = loop(x, jax.random.normal(key, (chunk_len, 2, nodes)), (eta, coupling))
            bold_buf, bold = offline(bold_buf, xs[::10, 0])
            return (xs[-1], bold_buf), (bold, xs[:, 0].mean(0))

        _, (bold, rates) = jax.lax.scan(chunk, (x0, bold_buf), jax.random.split(key, chunks))
        return bold, rates

    return run, (f32(nodes, nodes), f32(2, nodes), f32(nodes), f32(), KEY)


def vbjax_jr_delay_network(nodes: int, steps: int, max_delay: int, batch: int):
    """Jansen-Rit network with conduction delays (stochastic delay Heun), vmapped over couplings (vbjax)."""
    vb = _vbjax()

    def run(weights, lengths, history, noise, couplings):
        delays = vb.make_delay_helper(weights, lengths, dt=0.1, v_c=10.0)

        def one(k):
            def dfun(buf, x, t, p):
                delayed = vb.delay_apply(delays, t, buf[:, 1:3])
                return vb.jr_dfun(x, k * (delayed[0] - delayed[1]), vb.jr_default_theta)

            _, loop = vb.make_sdde(0.1, max_delay, dfun, 0.01)
            _, xs = loop(jnp.concatenate([history, noise], axis=0), None)
            eeg = xs[:, 1] - xs[:, 2]
            return eeg[::10], jnp.corrcoef(eeg[steps // 2:].T)

        return jax.vmap(one)(couplings)

    return run, (f32(nodes, nodes), f32(nodes, nodes), f32(max_delay + 1, 6, nodes),
                 f32(steps, 6, nodes), f32(batch))


def vbjax_mpr_fc_fit_step(nodes: int, steps: int):
    """Adam step fitting node excitabilities and coupling to an empirical FC, grad through the SDE (vbjax)."""
    import optax

    vb = _vbjax()

    def loss(params, weights, x0, zs, target_fc):
        _, loop = vb.make_sde(0.05, _mpr_network(vb, weights, nodes), 0.01, adhoc=vb.mpr_r_positive, unroll=4)
        xs = loop(x0, zs, (params["eta"], jnp.exp(params["log_coupling"])))
        mask = 1.0 - jnp.eye(nodes)
        return jnp.sum(mask * (jnp.corrcoef(xs[steps // 4:, 0].T) - target_fc) ** 2) / mask.sum()

    update, state = train(optax.adam(1e-2), loss, {"eta": f32(nodes), "log_coupling": f32()})
    return update, (*state, f32(nodes, nodes), f32(2, nodes), f32(steps, 2, nodes), f32(nodes, nodes))


# ------------------------------------------------------------------------------------------ flowMC


def _rqspline(n_dim, layers, hidden, bins):
    from flowMC.resource.model.nf_model.rqSpline import MaskedCouplingRQSpline

    return _eqx_abstract(MaskedCouplingRQSpline, n_dim, layers, [hidden, hidden], bins, jax.random.PRNGKey(0))


def _rosenbrock_logpdf(x, data):
    """A ring of banana-shaped (Rosenbrock) pairs, scaled by `data["scale"]`."""
    a, b = x[::2], x[1::2]
    return -jnp.sum((1.0 - a) ** 2 + data["scale"] * (b - a**2) ** 2) / 20.0


def _mala_steps(kernel, positions, log_probs, data, key, steps):
    """`steps` vmapped MALA transitions of every chain in scan: ((positions, log_probs), chain)."""
    def step(carry, key):
        positions, log_probs, accepted = jax.vmap(kernel.kernel, in_axes=(0, 0, 0, None, None))(
            jax.random.split(key, carry[0].shape[0]), *carry, _rosenbrock_logpdf, data)
        return (positions, log_probs), (positions, accepted.mean())

    return jax.lax.scan(step, (positions, log_probs), jax.random.split(key, steps))


def flowmc_rqspline_fit(n_dim: int, layers: int, bins: int, steps: int, batch: int, hidden: int = 64):
    """Masked-coupling rational-quadratic spline flow fitted to chain samples, Adam steps in scan (flowMC)."""
    import equinox as eqx
    import optax

    arrays, static = _rqspline(n_dim, layers, hidden, bins)
    # the coupling masks are boolean arrays: arguments too, but not trained
    params, masks = eqx.partition(arrays, lambda x: jnp.issubdtype(x.dtype, jnp.inexact))
    opt = optax.adam(1e-3)

    def loss(params, masks, x):
        return -jnp.mean(jax.vmap(eqx.combine(params, masks, static).log_prob)(x))

    def fit(params, masks, samples, key):
        def step(carry, key):
            idx = jax.random.randint(key, (batch,), 0, samples.shape[0])
            params, opt_state, value = apply_grads(opt, loss, *carry, masks, samples[idx])
            return (params, opt_state), value

        (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), jax.random.split(key, steps))
        return params, losses

    return fit, (params, masks, f32(16 * batch, n_dim), KEY)


def flowmc_mala_chains(n_dim: int, chains: int, steps: int):
    """Many MALA chains on a high-dimensional Rosenbrock target, vmapped kernel in scan (flowMC)."""
    from flowMC.resource.kernel.MALA import MALA

    def run(positions, step_size, scale, key):
        data = {"scale": scale}
        log_probs = jax.vmap(_rosenbrock_logpdf, in_axes=(0, None))(positions, data)
        (positions, log_probs), (_, acceptance) = _mala_steps(MALA(step_size), positions, log_probs, data,
                                                              key, steps)
        return positions, log_probs, acceptance

    return run, (f32(chains, n_dim), f32(n_dim), f32(), KEY)


def flowmc_global_local_round(n_dim: int, chains: int, local_steps: int, global_steps: int,
                              layers: int = 4, bins: int = 8):
    """One flowMC round: MALA local steps, then flow-proposal Metropolis-Hastings on every chain (flowMC)."""
    import equinox as eqx
    from flowMC.resource.kernel.MALA import MALA
    from flowMC.resource.kernel.NF_proposal import NFProposal

    params, static = _rqspline(n_dim, layers, 64, bins)

    def run(flow_params, positions, step_size, scale, key):
        proposal = NFProposal(eqx.combine(flow_params, static), n_NFproposal_batch_size=global_steps)
        data = {"scale": scale, "n_steps": global_steps}
        log_probs = jax.vmap(_rosenbrock_logpdf, in_axes=(0, None))(positions, data)
        k_local, k_global = jax.random.split(key)
        (positions, log_probs), (local_chain, _) = _mala_steps(MALA(step_size), positions, log_probs, data,
                                                               k_local, local_steps)
        global_chain, global_lp, accepted = jax.vmap(proposal.kernel, in_axes=(0, 0, 0, None, None))(
            jax.random.split(k_global, chains), positions, log_probs, _rosenbrock_logpdf, data)
        return local_chain, global_chain[:, -1], global_lp[:, -1], accepted.mean()

    return run, (params, f32(chains, n_dim), f32(n_dim), f32(), KEY)


# ------------------------------------------------------------------------------------------- jaxdf


def jaxdf_acoustic_inversion_step(n: int, steps: int):
    """Waveform inversion step: pseudo-spectral acoustic leapfrog in scan, grad wrt sound speed (jaxdf)."""
    import optax
    from jaxdf import FourierSeries
    from jaxdf.geometry import Domain
    from jaxdf.operators import diag_jacobian, gradient, sum_over_dims

    domain, dt = Domain((n, n), (1e-3, 1e-3)), 5e-8

    def misfit(log_c, p0, sensors, observed):
        c = FourierSeries(1500.0 * jnp.exp(log_c), domain)

        def step(fields, _):
            p, u = fields
            u = u - gradient(p) * (dt / 1000.0)
            p = p - (c * c) * sum_over_dims(diag_jacobian(u)) * (dt * 1000.0)
            return (p, u), p.params[sensors[:, 0], sensors[:, 1], 0]

        fields = (FourierSeries(p0, domain), FourierSeries(jnp.zeros((n, n, 2)), domain))
        _, traces = jax.lax.scan(step, fields, None, length=steps)
        return jnp.mean((traces - observed) ** 2) + 1e-3 * jnp.mean(log_c**2)

    update, state = train(optax.adam(1e-2), misfit, f32(n, n))
    return update, (*state, f32(n, n), i32(4 * n, 2), f32(steps, 4 * n))


def jaxdf_gray_scott_fd(n: int, steps: int):
    """Gray-Scott reaction-diffusion on finite-difference fields, staggered Laplacians, fori_loop (jaxdf)."""
    from jaxdf import FiniteDifferences
    from jaxdf.geometry import Domain
    from jaxdf.operators import diag_jacobian, gradient, sum_over_dims

    domain = Domain((n, n), (1.0, 1.0))

    def laplacian(field):
        return sum_over_dims(diag_jacobian(gradient(field, stagger=[0.5]), stagger=[-0.5]))

    def run(u0, v0, feed, kill):
        def step(_, uv):
            u, v = (FiniteDifferences(x, domain, accuracy=4) for x in uv)
            reaction = u * v * v
            du = laplacian(u) * 0.16 - reaction + (1.0 - u) * feed
            dv = laplacian(v) * 0.08 + reaction - v * (feed + kill)
            return (u.params[..., 0] + du.params[..., 0], v.params[..., 0] + dv.params[..., 0])

        return jax.lax.fori_loop(0, steps, step, (u0, v0))

    return run, (f32(n, n), f32(n, n), f32(), f32())


def jaxdf_pinn_helmholtz_step(width: int, depth: int, points: int):
    """Physics-informed MLP for 2-D Helmholtz: autodiff Laplacian of a Continuous field, Adam step (jaxdf)."""
    import optax
    from jaxdf import Continuous
    from jaxdf.geometry import Domain
    from jaxdf.operators import laplacian

    domain = Domain((64, 64), (1.0 / 64, 1.0 / 64))

    def field_fn(params, x):
        return mlp(params, jnp.concatenate([jnp.sin(jnp.pi * x), jnp.cos(jnp.pi * x)]))

    def loss(params, interior, boundary, k):
        u = Continuous(params, domain, field_fn)
        lap = laplacian(u)
        residual = jax.vmap(lambda x: lap(x) + k**2 * u(x) - jnp.sin(4 * x[0]) * x[1])(interior)
        return jnp.mean(residual**2) + 10.0 * jnp.mean(jax.vmap(u)(boundary) ** 2)

    update, state = train(optax.adam(1e-3), loss, shapes(mlp_init, (4,) + (width,) * depth + (1,)))
    return update, (*state, f32(points, 2), f32(points // 4, 2), f32())


# -------------------------------------------------------------------------------------------- pyhf


def _pyhf_model(bins: int, channels: int = 2):
    """A HistFactory model on the jax backend in float32: per channel a signal (normfactor mu)
    and two backgrounds (normsys, histosys, staterror, shapesys); importing pyhf's jax backend
    turns on jax_enable_x64 for the process, so the flag is put back."""
    x64 = jax.config.read("jax_enable_x64")
    import pyhf

    pyhf.set_backend("jax", precision="32b")
    jax.config.update("jax_enable_x64", x64)
    rng, spec = np.random.default_rng(0), {"channels": []}
    for c in range(channels):
        bkg1 = (200.0 * np.exp(-np.linspace(0, 3, bins)) + rng.uniform(1, 5, bins)).tolist()
        bkg2 = (50.0 + 10 * rng.uniform(size=bins)).tolist()
        sig = (20.0 * np.exp(-0.5 * (np.linspace(-2, 2, bins) / 0.5) ** 2) * (c + 1)).tolist()
        spec["channels"].append({"name": f"region{c}", "samples": [
            {"name": "signal", "data": sig,
             "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
            {"name": "bkg1", "data": bkg1, "modifiers": [
                {"name": "bkg1_norm", "type": "normsys", "data": {"hi": 1.05, "lo": 0.95}},
                {"name": "bkg1_shape", "type": "histosys",
                 "data": {"hi_data": [b * 1.03 for b in bkg1], "lo_data": [b * 0.97 for b in bkg1]}},
                {"name": f"stat{c}", "type": "staterror", "data": [np.sqrt(b) for b in bkg1]}]},
            {"name": "bkg2", "data": bkg2, "modifiers": [
                {"name": f"bkg2_unc{c}", "type": "shapesys", "data": [0.1 * b for b in bkg2]}]}]})
    model = pyhf.Model(spec, poi_name="mu", validate=False)
    return model, sum(model.config.channel_nbins.values()), len(model.config.auxdata)


def _pyhf_fit(model, data, init, steps, fixed_poi=None, lr=0.02):
    """Minimises -log L (the POI held at `fixed_poi` if given) by Adam in scan, parameters
    clipped to the suggested bounds; returns (parameters, -log L)."""
    import optax

    bounds, opt = jnp.asarray(model.config.suggested_bounds()), optax.adam(lr)

    def nll(pars):
        if fixed_poi is not None:
            pars = pars.at[model.config.poi_index].set(fixed_poi)
        return -model.logpdf(pars, data)[0]

    def step(carry, _):
        pars, opt_state = carry
        value, grads = jax.value_and_grad(nll)(pars)
        updates, opt_state = opt.update(grads, opt_state)
        return (jnp.clip(optax.apply_updates(pars, updates), bounds[:, 0], bounds[:, 1]), opt_state), value

    (pars, _), _ = jax.lax.scan(step, (init, opt.init(init)), None, length=steps)
    return pars, nll(pars)


def pyhf_profile_likelihood_scan(bins: int, points: int, steps: int):
    """Profile-likelihood scan of the signal strength: a free fit, then vmapped fits at fixed mu (pyhf)."""
    model, n_main, n_aux = _pyhf_model(bins)

    def scan_mu(observations, auxdata, init, mu_grid):
        data = jnp.concatenate([observations, auxdata])
        best, best_nll = _pyhf_fit(model, data, init, steps)
        fixed = jax.vmap(lambda mu: _pyhf_fit(model, data, best, steps, fixed_poi=mu)[1])(mu_grid)
        return best, 2.0 * (fixed - best_nll)

    return scan_mu, (f32(n_main), f32(n_aux), f32(model.config.npars), f32(points))


def pyhf_toy_test_statistics(bins: int, toys: int, steps: int):
    """Poisson toys from the background-only model, q_mu of each from two Adam fits, vmapped (pyhf)."""
    model, _, _ = _pyhf_model(bins)
    poi = model.config.poi_index

    def toys_fn(pars, mu_test, key):
        expected = model.expected_actualdata(pars.at[poi].set(0.0))
        main = jax.random.poisson(key, expected, (toys,) + expected.shape).astype(jnp.float32)
        auxdata = jnp.asarray(model.config.auxdata, jnp.float32)

        def q_mu(observations):
            data = jnp.concatenate([observations, auxdata])
            free, free_nll = _pyhf_fit(model, data, pars, steps)
            _, fixed_nll = _pyhf_fit(model, data, pars, steps, fixed_poi=mu_test)
            return jnp.where(free[poi] > mu_test, 0.0, 2.0 * (fixed_nll - free_nll))

        return jax.vmap(q_mu)(main)

    return toys_fn, (f32(model.config.npars), f32(), KEY)


def pyhf_newton_fit_uncertainties(bins: int, channels: int, datasets: int, iters: int):
    """Damped Newton fits with the exact Hessian of -log L, covariance errors, vmapped over data (pyhf)."""
    model, n_main, n_aux = _pyhf_model(bins, channels=channels)
    bounds = jnp.asarray(model.config.suggested_bounds())

    def fit(observations, auxdata, init):
        def nll(pars):
            return -model.logpdf(pars, jnp.concatenate([observations, auxdata]))[0]

        def newton(_, pars):
            hessian = jax.hessian(nll)(pars) + 1e-3 * jnp.eye(pars.shape[0])
            step = jnp.linalg.solve(hessian, jax.grad(nll)(pars))
            return jnp.clip(pars - 0.7 * step, bounds[:, 0], bounds[:, 1])

        pars = jax.lax.fori_loop(0, iters, newton, init)
        return pars, jnp.sqrt(jnp.diag(jnp.linalg.inv(jax.hessian(nll)(pars))))

    return (jax.vmap(fit, in_axes=(0, None, None)),
            (f32(datasets, n_main), f32(n_aux), f32(model.config.npars)))


# ------------------------------------------------------------------------------------------ augmax


def augmax_simclr_step(batch: int, size: int, crop: int, width: int = 32):
    """SimCLR step: two views per image (crop, flip, jitter, grey, blur), NT-Xent loss, AdamW (augmax)."""
    import augmax
    import optax

    views = augmax.Chain(augmax.RandomSizedCrop(crop, crop, zoom_range=(0.5, 1.5)),
                         augmax.HorizontalFlip(), augmax.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
                         augmax.RandomGrayscale(p=0.2), augmax.GaussianBlur(sigma=1, p=0.5))

    def loss(params, images, key, temperature=0.2):
        # both views of every image in one vmapped augmentation
        pairs = jax.vmap(views)(jax.random.split(key, 2 * batch), jnp.concatenate([images, images]))
        z = _cnn(params, pairs)
        z = z / jnp.linalg.norm(z, axis=-1, keepdims=True)
        sim = z @ z.T / temperature - 1e9 * jnp.eye(2 * batch)
        positives = jnp.concatenate([jnp.arange(batch) + batch, jnp.arange(batch)])
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(sim), positives[:, None], -1))

    update, state = train(optax.adamw(1e-3, weight_decay=1e-4), loss,
                           shapes(_cnn_init, (3, width, 2 * width, 4 * width), 128))
    return update, (*state, f32(batch, size, size, 3), KEY)


def augmax_segmentation_step(batch: int, size: int, classes: int, width: int = 32):
    """Joint image/mask augmentation (rotate, crop, flip, brightness), dilated-conv segmenter (augmax)."""
    import augmax
    import optax

    crop = size * 3 // 4
    pairs = augmax.Chain(augmax.Rotate((-20, 20)), augmax.RandomCrop(crop, crop), augmax.HorizontalFlip(),
                         augmax.RandomBrightness(p=0.5),
                         input_types=[augmax.InputType.IMAGE, augmax.InputType.MASK])

    def loss(params, images, masks, key):
        keys = jax.random.split(key, batch)
        x, masks = jax.vmap(lambda k, i, m: tuple(pairs(k, [i, m])))(keys, images, masks)
        for kernel in params:
            x = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", rhs_dilation=(2, 2),
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
            x = jax.nn.relu(x) if kernel.shape[-1] != classes else x
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(x, masks))

    def init(key):
        sizes = (3, width, width, width, classes)
        return [jax.random.normal(k, (3, 3, a, b)) / np.sqrt(9 * a)
                for k, a, b in zip(jax.random.split(key, 4), sizes[:-1], sizes[1:], strict=True)]

    update, state = train(optax.adam(1e-3), loss, shapes(init))
    return update, (*state, f32(batch, size, size, 3), i32(batch, size, size), KEY)


# ----------------------------------------------------------------------------------------- jax-cfd


def jaxcfd_fvm_kolmogorov(n: int, outer: int, inner: int):
    """Finite-volume Navier-Stokes, Kolmogorov forcing, Heun RK2 + pressure projection (jax-cfd)."""
    import jax_cfd.base as cfd

    grid = cfd.grids.Grid((n, n), domain=((0, 2 * jnp.pi), (0, 2 * jnp.pi)))
    dt = 0.5 * cfd.equations.stable_time_step(7.0, 0.5, 1e-3, grid)
    kolmogorov, drag = cfd.forcings.kolmogorov_forcing(grid, k=4), cfd.forcings.linear_forcing(grid, -0.1)

    def forcing(v):
        # forcings.sum_forcings calls the removed jax.tree_map: the two are summed here
        return tuple(a + b for a, b in zip(kolmogorov(v), drag(v), strict=True))

    step = cfd.equations.semi_implicit_navier_stokes(density=1.0, viscosity=1e-3, dt=dt, grid=grid,
                                                     forcing=forcing, time_stepper=cfd.time_stepping.heun_rk2)
    bc = cfd.boundaries.periodic_boundary_conditions(2)

    def run(u, v):
        velocity = tuple(cfd.grids.GridVariable(cfd.grids.GridArray(data, offset, grid), bc)
                         for data, offset in zip((u, v), grid.cell_faces, strict=True))
        rollout = cfd.funcutils.trajectory(cfd.funcutils.repeated(step, inner), outer,
                                           lambda vel: cfd.finite_differences.curl_2d(vel).data)
        final, vorticity = rollout(velocity)
        return final[0].data, final[1].data, vorticity

    return run, (f32(n, n), f32(n, n))


def _spectral_solver(n, viscosity, forced):
    import jax_cfd.base as cfd
    import jax_cfd.spectral as spectral

    grid = cfd.grids.Grid((n, n), domain=((0, 2 * jnp.pi), (0, 2 * jnp.pi)))
    equation = (spectral.equations.ForcedNavierStokes2D(viscosity, grid, smooth=True) if forced
                else spectral.equations.NavierStokes2D(viscosity, grid, drag=0.0, smooth=True))
    dt = cfd.equations.stable_time_step(5.0, 0.5, viscosity, grid)
    step = spectral.time_stepping.crank_nicolson_rk4(equation, dt)
    return lambda outer, inner: cfd.funcutils.trajectory(cfd.funcutils.repeated(step, inner), outer,
                                                         jnp.fft.irfftn)


def jaxcfd_spectral_turbulence(n: int, batch: int, outer: int, inner: int):
    """Pseudo-spectral forced 2-D turbulence (Crank-Nicolson RK4), a batch of trajectories (jax-cfd)."""
    rollout = _spectral_solver(n, 1e-3, forced=True)(outer, inner)

    def run(vorticity):
        final, frames = jax.vmap(rollout)(jnp.fft.rfftn(vorticity, axes=(1, 2)))
        return jnp.fft.irfftn(final, axes=(1, 2)), jnp.mean(frames**2, axis=(2, 3))

    return run, (f32(batch, n, n),)


def jaxcfd_spectral_assimilation_step(n: int, steps: int, observations: int):
    """4D-Var style Adam step on the initial vorticity, grad through the spectral solver in scan (jax-cfd)."""
    import optax

    rollout = _spectral_solver(n, 5e-3, forced=False)(observations, steps // observations)

    def loss(omega0, observed):
        _, frames = rollout(jnp.fft.rfftn(omega0))
        return jnp.mean((frames - observed) ** 2) + 1e-4 * jnp.mean(omega0**2)

    update, state = train(optax.adam(1e-2), loss, f32(n, n))
    return update, (*state, f32(observations, n, n))


# ---------------------------------------------------------------------------------------- dinosaur


def _dinosaur_coords(grid: str, layers: int):
    from dinosaur import coordinate_systems, sigma_coordinates, spherical_harmonic

    return coordinate_systems.CoordinateSystem(horizontal=getattr(spherical_harmonic.Grid, grid)(),
                                               vertical=sigma_coordinates.SigmaCoordinates.equidistant(layers))


def _dinosaur_dry_core(grid: str, layers: int, held_suarez: bool):
    """(`make(orography)` building the primitive equations [+ Held-Suarez forcing] over a nodal
    orography, abstract initial state and orography, time step, coords)."""
    from dinosaur import held_suarez as hs
    from dinosaur import primitive_equations as pe
    from dinosaur import primitive_equations_states, scales, time_integration, xarray_utils

    units, coords = scales.units, _dinosaur_coords(grid, layers)
    specs = pe.PrimitiveEquationsSpecs.from_si()
    state_fn, aux = primitive_equations_states.isothermal_rest_atmosphere(
        coords, specs, p0=1e5 * units.pascal, p1=5e3 * units.pascal)
    ref_temps = aux[xarray_utils.REF_TEMP_KEY]

    def make(orography):
        modal = pe.truncated_modal_orography(orography, coords)
        equation = pe.PrimitiveEquations(ref_temps, modal, coords, specs)
        if not held_suarez:
            return equation
        forcing = hs.HeldSuarezForcing(coords=coords, physics_specs=specs, reference_temperature=ref_temps,
                                       p0=1e5 * units.pascal)
        return time_integration.compose_equations([equation, forcing])

    state = jax.eval_shape(state_fn, jax.random.PRNGKey(0))
    dt = specs.nondimensionalize(10 * units.minute)
    return make, state, f32(*coords.horizontal.nodal_shape), dt, coords


def dinosaur_held_suarez(grid: str, layers: int, outer: int, inner: int):
    """Held-Suarez dry core: spectral primitive equations, IMEX SIL3 + filter, trajectory (dinosaur)."""
    from dinosaur import time_integration as ti

    make, state, orography, dt, coords = _dinosaur_dry_core(grid, layers, held_suarez=True)

    def run(state, orography):
        step = ti.step_with_filters(ti.imex_rk_sil3(make(orography), dt),
                                    [ti.exponential_step_filter(coords.horizontal, dt)])

        def frames(s):
            return coords.horizontal.to_nodal(s.temperature_variation).mean(axis=(1, 2))

        return ti.trajectory_from_step(step, outer, inner, post_process_fn=frames)(state)

    return run, (state, orography)


def dinosaur_temperature_sensitivity(grid: str, layers: int, steps: int):
    """Sensitivity of final kinetic energy to the initial temperature, grad through the dycore (dinosaur)."""
    import dataclasses

    from dinosaur import time_integration as ti

    make, state, orography, dt, coords = _dinosaur_dry_core(grid, layers, held_suarez=False)

    def run(state, orography):
        step = ti.imex_rk_sil3(make(orography), dt)

        def kinetic_energy(temperature):
            final = ti.repeated(step, steps)(dataclasses.replace(state, temperature_variation=temperature))
            to_nodal = coords.horizontal.to_nodal
            return jnp.mean(to_nodal(final.vorticity) ** 2 + to_nodal(final.divergence) ** 2)

        return jax.value_and_grad(kinetic_energy)(state.temperature_variation)

    return run, (state, orography)


def dinosaur_shallow_water(grid: str, layers: int, outer: int, inner: int):
    """Multi-layer shallow water barotropic instability on the sphere, semi-implicit leapfrog (dinosaur)."""
    from dinosaur import primitive_equations, scales, shallow_water, shallow_water_states, xarray_utils

    coords = _dinosaur_coords(grid, layers)
    specs = primitive_equations.PrimitiveEquationsSpecs.from_si()
    densities = np.linspace(1.0, 1.2, layers)
    state_fn, aux = shallow_water_states.barotropic_instability_tc(coords, specs, densities)
    dt = specs.nondimensionalize(5 * scales.units.minute)
    trajectory = shallow_water.shallow_water_leapfrog_trajectory(
        coords, dt, specs, inner, outer, aux[xarray_utils.REF_POTENTIAL_KEY],
        orography=jnp.zeros(coords.horizontal.modal_shape), densities=densities,
        filters=shallow_water.default_filters(coords.horizontal, dt))

    def run(previous, current):
        final, states = trajectory((previous, current))
        return final, states.potential

    state = jax.eval_shape(state_fn, jax.random.PRNGKey(0))
    return run, (state, state)


# ------------------------------------------------------------------------------------------ equimo


def _equimo_classifier_step(make, batch: int, size: int, classes: int, lr: float):
    """AdamW step of an equimo image classifier: per-example keys (drop-path), label smoothing."""
    import equinox as eqx
    import optax

    params, static = _eqx_abstract(make, key=jax.random.PRNGKey(0))

    def loss(params, images, labels, key):
        model = eqx.combine(params, static)
        logits = jax.vmap(lambda x, k: model(x, key=k, inference=False))(images, jax.random.split(key, batch))
        targets = optax.smooth_labels(jax.nn.one_hot(labels, classes), 0.1)
        return jnp.mean(optax.softmax_cross_entropy(logits, targets))

    update, state = train(optax.adamw(lr, weight_decay=0.05), loss, params)
    return update, (*state, f32(batch, 3, size, size), i32(batch), KEY)


def equimo_vit_train_step(size: int, patch: int, dim: int, depth: int, heads: int, batch: int,
                          classes: int = 100):
    """Vision transformer classifier with drop-path and register tokens, AdamW step (equimo)."""
    from equimo.models import VisionTransformer

    def make(key):
        return VisionTransformer(size, 3, dim, patch, heads, [depth], key=key, num_classes=classes,
                                 reg_tokens=4, drop_path_rate=0.1, global_pool="token")

    return _equimo_classifier_step(make, batch, size, classes, 3e-4)


def equimo_convnext_train_step(size: int, width: int, blocks: int, batch: int, classes: int = 10):
    """ConvNeXt classifier (depthwise 7x7 blocks, layer scale), AdamW step (equimo)."""
    from equimo.models import ConvNeXt

    def make(key):
        return ConvNeXt(3, depths=[1, 1, blocks, 1], dims=[width, 2 * width, 4 * width, 8 * width],
                        drop_path_rate=0.1, num_classes=classes, key=key)

    return _equimo_classifier_step(make, batch, size, classes, 1e-3)


def equimo_attnet_predict(size: int, blocks: int, batch: int):
    """Batched AttNet (convolutional attention network) inference with flip averaging, top-5 (equimo)."""
    import equinox as eqx
    from equimo.models import AttNet

    params, static = _eqx_abstract(AttNet, 3, depths=[1, 1, blocks, 1], key=jax.random.PRNGKey(0),
                                   num_classes=1000)

    def predict(params, images):
        model = eqx.combine(params, static)

        def one(x):
            return jax.nn.softmax((model(x, inference=True) + model(x[:, :, ::-1], inference=True)) / 2)

        return jax.lax.top_k(jax.vmap(one)(images), 5)

    return predict, (params, f32(batch, 3, size, size))


# -------------------------------------------------------------------------------------------- mpax


def mpax_transport_lp(sources: int, sinks: int, iterations: int):
    """Optimal-transport linear program (dense constraints) solved by restarted Halpern PDHG (mpax)."""
    from mpax import create_lp, r2HPDHG

    n = sources * sinks
    rows, cols = jnp.repeat(jnp.eye(sources), sinks, axis=1), jnp.tile(jnp.eye(sinks), (1, sources))

    def solve(cost, supply, demand):
        # minimise c.x subject to row sums = supply and column sums >= demand
        lp = create_lp(cost.reshape(-1), rows, supply, cols, demand, jnp.zeros(n), jnp.full(n, jnp.inf),
                       use_sparse_matrix=False)
        result = r2HPDHG(eps_abs=1e-4, eps_rel=1e-4, iteration_limit=iterations).optimize(lp)
        return result.primal_solution.reshape(sources, sinks), result.primal_objective

    return solve, (f32(sources, sinks), f32(sources), f32(sinks))


def mpax_batched_knapsack_lp(items: int, constraints: int, batch: int, iterations: int):
    """LP relaxations of a batch of multi-dimensional knapsacks, vmapped adaptive PDHG solves (mpax)."""
    from mpax import create_lp, raPDHG

    def solve_one(values, weights, capacity):
        lp = create_lp(-values, jnp.zeros((0, items)), jnp.zeros(0), -weights, -capacity,
                       jnp.zeros(items), jnp.ones(items), use_sparse_matrix=False)
        result = raPDHG(eps_abs=1e-4, eps_rel=1e-4, iteration_limit=iterations).optimize(lp)
        return result.primal_solution, result.primal_objective

    return jax.vmap(solve_one), (f32(batch, items), f32(batch, constraints, items), f32(batch, constraints))


def mpax_portfolio_qp_frontier(assets: int, factors: int, points: int, iterations: int):
    """Mean-variance efficient frontier: a factor-model QP per risk aversion, vmapped PDHG (mpax)."""
    import dataclasses

    from mpax import create_qp, r2HPDHG

    def solve_one(gamma, mu, loadings, idio):
        cov = loadings @ loadings.T + jnp.diag(idio)
        # budget equality, long-only with a 10% cap per asset; a traced dense Q leaves create_qp's
        # static is-it-an-LP flag traced, so it is set (the objective is quadratic)
        qp = create_qp(gamma * cov, -mu, jnp.ones((1, assets)), jnp.ones(1), jnp.zeros((0, assets)),
                       jnp.zeros(0), jnp.zeros(assets), jnp.full(assets, 0.1), use_sparse_matrix=False)
        result = r2HPDHG(eps_abs=1e-5, eps_rel=1e-5, iteration_limit=iterations).optimize(
            dataclasses.replace(qp, is_lp=False))
        w = result.primal_solution
        return w, w @ mu, w @ cov @ w

    def frontier(gammas, mu, loadings, idio):
        return jax.vmap(solve_one, in_axes=(0, None, None, None))(gammas, mu, loadings, idio)

    return frontier, (f32(points), f32(assets), f32(assets, factors), f32(assets))


# ------------------------------------------------------------------------------------------ evojax


def evojax_pgpe_generation(task: str, pairs: int, steps: int, hidden: int = 64):
    """One PGPE generation: antithetic MLP population rolled out in a task, rank-shaped update (evojax)."""
    import optax
    from evojax.algo.pgpe import ask_func, compute_reinforce_update, process_scores, update_stdev
    from evojax.policy import MLPPolicy

    if task == "cartpole":
        from evojax.task.cartpole import CartPoleSwingUp

        env = CartPoleSwingUp(max_steps=steps, harder=True)
    else:
        from evojax.task.slimevolley import SlimeVolley

        env = SlimeVolley(max_steps=steps)
    policy = MLPPolicy(env.obs_shape[0], [hidden, hidden], env.act_shape[0])
    opt = optax.adam(0.05)

    def fitness(population, key):
        # one episode per member in scan; rewards after an episode ends are masked
        state = env.reset(jax.random.split(key, population.shape[0]))

        def step(carry, _):
            state, p_state, total, alive = carry
            actions, p_state = policy.get_actions(state, population, p_state)
            state, reward, done = env.step(state, actions)
            return (state, p_state, total + reward * alive, alive * (1 - done.astype(jnp.float32))), None

        ones = jnp.ones(population.shape[0])
        init = (state, policy.reset(state), 0 * ones, ones)
        (_, _, total, _), _ = jax.lax.scan(step, init, None, length=steps)
        return total

    def generation(center, stdev, opt_state, key):
        k_ask, k_eval = jax.random.split(key)
        _, noises, population = ask_func(k_ask, stdev, center, pairs, policy.num_params)
        scores = fitness(population, k_eval)
        grad_center, grad_stdev = compute_reinforce_update(process_scores(scores, True), noises, stdev)
        updates, opt_state = opt.update(-grad_center, opt_state)
        stdev = update_stdev(stdev, 0.1, grad_stdev, 0.2)
        return optax.apply_updates(center, updates), stdev, opt_state, scores.max()

    center = f32(policy.num_params)
    return generation, (center, center, jax.eval_shape(opt.init, center), KEY)


# --------------------------------------------------------------------------------------- jax-cosmo


def _cosmology(p):
    """A flat wCDM cosmology from the parameter vector (Omega_c, Omega_b, h, n_s, sigma8, w0)."""
    import jax_cosmo as jc

    return jc.Cosmology(Omega_c=p[0], Omega_b=p[1], h=p[2], n_s=p[3], sigma8=p[4], Omega_k=0.0, w0=p[5],
                        wa=0.0)


def jaxcosmo_lensing_likelihood(bins: int, ells: int):
    """Cosmic-shear Gaussian likelihood: tomographic Limber C_ells (linear P(k)), covariance (jax-cosmo)."""
    import jax_cosmo as jc

    def log_like(p, z0, ell, data):
        nzs = [jc.redshift.smail_nz(1.0, 2.0, z0[i], gals_per_arcmin2=10.0) for i in range(bins)]
        mu, cov = jc.angular_cl.gaussian_cl_covariance_and_mean(
            _cosmology(p), ell, [jc.probes.WeakLensing(nzs, sigma_e=0.26)], nonlinear_fn=jc.power.linear,
            f_sky=0.25, sparse=True)
        return jc.likelihood.gaussian_log_likelihood(data, mu, cov, include_logdet=False)

    return log_like, (f32(6), f32(bins), f32(ells), f32(bins * (bins + 1) // 2 * ells))


def jaxcosmo_supernova_grid(points: int, supernovae: int):
    """Supernova Hubble-diagram likelihood on a grid of (Omega_c, w0), distances vmapped (jax-cosmo)."""
    import jax_cosmo as jc

    def log_like(omega_c, w0, base, z, mu_obs, sigma):
        cosmo = _cosmology(base.at[0].set(omega_c).at[5].set(w0))
        a = jc.utils.z2a(z)
        mu = 5.0 * jnp.log10(jc.background.transverse_comoving_distance(cosmo, a) / a / cosmo.h) + 25.0
        offset = jnp.sum((mu_obs - mu) / sigma**2) / jnp.sum(1 / sigma**2)  # magnitude zero point, profiled
        return -0.5 * jnp.sum(((mu_obs - mu - offset) / sigma) ** 2)

    def grid(omega_c, w0, *data):
        row = jax.vmap(log_like, in_axes=(None, 0, None, None, None, None))
        return jax.vmap(row, in_axes=(0, None, None, None, None, None))(omega_c, w0, *data)

    return grid, (f32(points), f32(points), f32(6), f32(supernovae), f32(supernovae), f32(supernovae))


# (builder, sizes) of each program measured
PROGRAMS = (
    (jaxmarl_mpe_ippo_update, dict(env_id="MPE_simple_spread_v3", num_envs=16, steps=32)),
    (jaxmarl_masked_rollout, dict(env_id="HeuristicEnemySMAX", scenario="3m", num_envs=8, steps=32)),
    (jaxmarl_masked_rollout, dict(env_id="hanabi", num_envs=8, steps=32, hidden=256)),
    (vbjax_mpr_bold_network, dict(nodes=84, chunks=20, chunk_len=1000)),
    (vbjax_jr_delay_network, dict(nodes=68, steps=2000, max_delay=200, batch=4)),
    (vbjax_jr_delay_network, dict(nodes=84, steps=4000, max_delay=400, batch=8)),
    (vbjax_mpr_fc_fit_step, dict(nodes=68, steps=2000)),
    (flowmc_rqspline_fit, dict(n_dim=8, layers=6, bins=8, steps=100, batch=512)),
    (flowmc_mala_chains, dict(n_dim=32, chains=64, steps=200)),
    (flowmc_mala_chains, dict(n_dim=64, chains=256, steps=500)),
    (flowmc_global_local_round, dict(n_dim=8, chains=32, local_steps=50, global_steps=50)),
    (jaxdf_acoustic_inversion_step, dict(n=128, steps=200)),
    (jaxdf_acoustic_inversion_step, dict(n=256, steps=400)),
    (jaxdf_gray_scott_fd, dict(n=256, steps=500)),
    (jaxdf_gray_scott_fd, dict(n=512, steps=2000)),
    (jaxdf_pinn_helmholtz_step, dict(width=64, depth=4, points=1024)),
    (pyhf_profile_likelihood_scan, dict(bins=20, points=32, steps=200)),
    (pyhf_profile_likelihood_scan, dict(bins=40, points=64, steps=300)),
    (pyhf_toy_test_statistics, dict(bins=10, toys=256, steps=100)),
    (pyhf_newton_fit_uncertainties, dict(bins=12, channels=1, datasets=16, iters=10)),
    (augmax_simclr_step, dict(batch=64, size=64, crop=48)),
    (augmax_segmentation_step, dict(batch=16, size=64, classes=5)),
    (jaxcfd_fvm_kolmogorov, dict(n=64, outer=20, inner=10)),
    (jaxcfd_fvm_kolmogorov, dict(n=128, outer=40, inner=10)),
    (jaxcfd_spectral_turbulence, dict(n=128, batch=4, outer=20, inner=20)),
    (jaxcfd_spectral_turbulence, dict(n=256, batch=2, outer=50, inner=20)),
    (jaxcfd_spectral_assimilation_step, dict(n=64, steps=200, observations=10)),
    (dinosaur_held_suarez, dict(grid="T21", layers=12, outer=10, inner=12)),
    (dinosaur_temperature_sensitivity, dict(grid="T21", layers=8, steps=12)),
    (dinosaur_shallow_water, dict(grid="T42", layers=2, outer=10, inner=20)),
    (equimo_vit_train_step, dict(size=32, patch=4, dim=192, depth=2, heads=3, batch=32)),
    (equimo_convnext_train_step, dict(size=64, width=32, blocks=3, batch=16)),
    (equimo_attnet_predict, dict(size=224, blocks=3, batch=8)),
    (mpax_transport_lp, dict(sources=24, sinks=32, iterations=2000)),
    (mpax_transport_lp, dict(sources=32, sinks=48, iterations=4000)),
    (mpax_batched_knapsack_lp, dict(items=64, constraints=5, batch=32, iterations=1000)),
    (mpax_portfolio_qp_frontier, dict(assets=100, factors=8, points=16, iterations=2000)),
    (evojax_pgpe_generation, dict(task="cartpole", pairs=64, steps=500)),
    (evojax_pgpe_generation, dict(task="slimevolley", pairs=32, steps=300, hidden=32)),
    (jaxcosmo_lensing_likelihood, dict(bins=3, ells=20)),
    (jaxcosmo_supernova_grid, dict(points=32, supernovae=300)),
    (jaxcosmo_supernova_grid, dict(points=64, supernovae=1000)),
)
# the pip package of each builder name's prefix
LIBRARIES = {"jaxmarl": "jaxmarl", "vbjax": "vbjax", "flowmc": "flowMC", "jaxdf": "jaxdf", "pyhf": "pyhf",
             "augmax": "augmax", "jaxcfd": "jax-cfd", "dinosaur": "dinosaur", "equimo": "equimo",
             "mpax": "mpax", "evojax": "evojax", "jaxcosmo": "jax-cosmo"}

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES),
                                     prefix="outside_c")
