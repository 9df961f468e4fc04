"""A fourth suite of outside programs, second part: built with public JAX libraries that no
corpus family, other bench or training row uses, as their users write them. As in
`bench/evaluations/outside_programs_c.py`, each builder returns a new function and abstract
arguments (parameters, optimizer, solver, simulator and environment states, keys and data are
arguments, not captured constants); `OUTSIDE_FAMILIES` registers one family per builder
(prefix `outside_d2`), its grid the sizes measured.

- probdiffeq: adaptive EK1 fixed-point-smoother solves of Lotka-Volterra vmapped over initial
  values, an Adam step on rates by a fixed-grid smoother's marginal likelihood (grad through the
  solver), a second-order Fermi-Pasta-Ulam chain to its terminal value (EK0 filter, isotropic
  and block-diagonal state-space models).
- tensorflow-probability (JAX substrate): NUTS chains of a hierarchical logistic regression
  (dual-averaging step sizes), a RealNVP flow maximum-likelihood step, an ARD Matern GP
  hyperparameter step with predictions, a structural time series fitted by VI and forecast.
- jaxoplanet: limb-darkened transit light curves of many planets (exposure integration), an Adam
  step on a joint transit + radial-velocity likelihood of an eccentric Keplerian planet, a
  period x duration transit search.
- coreax: kernel herding with MMD against a random sample, Stein thinning towards a Gaussian
  mixture with its KSD, kernel thinning with its MMD.
- navix: random rollouts of batched MiniGrid environments, PPO on egocentric symbolic views, a
  DQN step with a convolutional Q-network on categorical views.
- jax-finufft: an Adam fit of Fourier coefficients to scattered samples (type 2), multi-coil
  radial MRI by conjugate gradients (types 1 and 2), batched Lomb-Scargle periodograms (type 1).
- fdtdx: a forward 3-D FDTD run through a permittivity device, an inverse-design Adam step (grad
  through the time-reversible FDTD).

Networks are plain jax.numpy MLPs or CNNs unless the library ships its own; optax supplies
optimizers. fdtdx places its objects outside any trace (in the builder); the placed field arrays
and device parameters are abstract arguments. jax-finufft's vmap rule fails on this jax
(`batching.not_mapped`): its batches use the library's own broadcasting. coreax kernels take
their length scales as Python floats (static configuration).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from _outside_common import (
    KEY,
    apply_grads,
    c64,
    clipped_surrogate,
    f32,
    gae,
    i32,
    mlp,
    mlp_init,
    shapes,
    train,
)

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders

# ------------------------------------------------------------------------------------- probdiffeq


def _lotka_volterra(theta):
    """The Lotka-Volterra vector field with rates `theta` (a, b, c, d)."""
    def f(y, *, t):
        prey, predator = y[0], y[1]
        return jnp.stack([theta[0] * prey - theta[1] * prey * predator,
                          -theta[2] * predator + theta[3] * prey * predator])

    return f


def probdiffeq_adaptive_batch(num_derivatives: int, save_points: int, batch: int):
    """Adaptive EK1 fixed-point-smoother Lotka-Volterra solves, vmapped over initial values (probdiffeq)."""
    import probdiffeq.ivpsolve as ivpsolve
    import probdiffeq.probdiffeq as pdq

    def solve_one(u0, theta, save_at):
        vf = pdq.ode(_lotka_volterra(theta), jacobian=pdq.jacobian_materialize())
        tcoeffs, _ = pdq.jetexpand_ode_padded_scan(num=num_derivatives)(vf, [u0], t=save_at[0])
        ssm = pdq.state_space_model_dense()
        constraint = ssm.constraint_ode_ts1(vf)
        solver = pdq.solver_mle(constraint=constraint, strategy=pdq.strategy_smoother_fixedpoint())
        error = pdq.error_residual_std(constraint=constraint)
        solve = ivpsolve.solve_adaptive_save_at(solver=solver, error=error)
        solution = solve(ssm.prior_wiener_integrated(tcoeffs), save_at=save_at, atol=1e-4, rtol=1e-4)
        return solution.u.mean[0], solution.u.std[0], solution.num_steps

    def run(u0s, theta, save_at):
        means, stds, steps = jax.vmap(solve_one, in_axes=(0, None, None))(u0s, theta, save_at)
        return means, stds, steps.sum()

    return run, (f32(batch, 2), f32(4), f32(save_points))


def probdiffeq_lml_fit_step(num_derivatives: int, grid_points: int):
    """Adam step on rates and initial value by the marginal likelihood of an EK1 smoother (probdiffeq)."""
    import optax
    import probdiffeq.ivpsolve as ivpsolve
    import probdiffeq.probdiffeq as pdq

    def neg_lml(params, grid, data, noise_std):
        vf = pdq.ode(_lotka_volterra(jnp.exp(params["log_theta"])), jacobian=pdq.jacobian_materialize())
        u0 = jnp.exp(params["log_u0"])
        tcoeffs, _ = pdq.jetexpand_ode_padded_scan(num=num_derivatives)(vf, [u0], t=grid[0])
        ssm = pdq.state_space_model_dense()
        prior = ssm.prior_wiener_integrated(tcoeffs, output_scale=jnp.exp(params["log_scale"]))
        solver = pdq.solver(constraint=ssm.constraint_ode_ts1(vf),
                            strategy=pdq.strategy_smoother_fixedinterval())
        solution = ivpsolve.solve_fixed_grid(solver=solver)(prior, grid=grid)
        lml = pdq.loss_lml_timeseries()(data, posterior=solution.solution_full,
                                        std=jnp.broadcast_to(noise_std, data.shape))
        return -lml

    params = {"log_theta": f32(4), "log_u0": f32(2), "log_scale": f32(2)}
    update, state = train(optax.adam(1e-2), neg_lml, params)
    return update, (*state, f32(grid_points), f32(grid_points, 2), f32())


def probdiffeq_fpu_chain_terminal(masses: int, num_derivatives: int, ssm: str = "isotropic"):
    """Second-order Fermi-Pasta-Ulam chain, adaptive EK0 filter to the terminal value (probdiffeq)."""
    import probdiffeq.ivpsolve as ivpsolve
    import probdiffeq.probdiffeq as pdq

    def run(q0, p0, alpha, t1):
        @pdq.ode_order_two
        def vf(q, dq, *, t):
            # fixed ends; the quadratic (alpha) FPU force between neighbours
            stretch = jnp.diff(jnp.concatenate([jnp.zeros(1), q, jnp.zeros(1)]))
            force = stretch + alpha * stretch**2
            return force[1:] - force[:-1] - 0.01 * dq

        tcoeffs, _ = pdq.jetexpand_ode_padded_scan(num=num_derivatives)(vf, [q0, p0], t=0.0)
        model = getattr(pdq, f"state_space_model_{ssm}")()
        constraint = model.constraint_ode_ts0(vf)
        solver = pdq.solver_dynamic(constraint=constraint, strategy=pdq.strategy_filter())
        solve = ivpsolve.solve_adaptive_terminal_values(solver=solver,
                                                        error=pdq.error_residual_std(constraint=constraint))
        solution = solve(model.prior_wiener_integrated(tcoeffs), t0=0.0, t1=t1, atol=1e-3, rtol=1e-3)
        energy = 0.5 * jnp.sum(solution.u.mean[1] ** 2)
        return solution.u.mean[0], energy, solution.num_steps

    return run, (f32(masses), f32(masses), f32(), f32())


# ----------------------------------------------------------------------- tensorflow-probability


def tfp_nuts_hierarchical_logistic(features: int, groups: int, points: int, chains: int, steps: int,
                                   max_tree_depth: int = 6):
    """NUTS chains of a hierarchical logistic regression (tensorflow-probability, JAX substrate)."""
    from tensorflow_probability.substrates import jax as tfp

    tfd = tfp.distributions

    def run(x, group, y, init, key):
        def log_prob(mu, log_tau, beta):
            prior = (tfd.Normal(0.0, 1.0).log_prob(mu).sum() + tfd.Normal(0.0, 1.0).log_prob(log_tau).sum()
                     + tfd.Normal(mu, jnp.exp(log_tau)).log_prob(beta).sum())
            logits = jnp.sum(x * beta[group], axis=-1)
            return prior + tfd.Bernoulli(logits=logits).log_prob(y).sum()

        def target(mu, log_tau, beta):
            # one log density per chain
            return jax.vmap(log_prob)(mu, log_tau, beta)

        kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(
            tfp.mcmc.NoUTurnSampler(target, step_size=0.1, max_tree_depth=max_tree_depth),
            num_adaptation_steps=steps // 2)
        samples, (accept, leapfrogs) = tfp.mcmc.sample_chain(
            num_results=steps // 2, num_burnin_steps=steps // 2, current_state=init, kernel=kernel,
            trace_fn=lambda _, r: (r.inner_results.is_accepted, r.inner_results.leapfrogs_taken), seed=key)
        rhat = tfp.mcmc.potential_scale_reduction(samples[2])
        return jax.tree.map(lambda s: s.mean(0), samples), accept.mean(), leapfrogs.sum(), rhat

    init = (f32(chains, features), f32(chains, features), f32(chains, groups, features))
    return run, (f32(points, features), i32(points), f32(points), init, KEY)


def tfp_realnvp_flow_step(dims: int, layers: int, hidden: int, batch: int):
    """Maximum-likelihood Adam step of a RealNVP flow (tensorflow-probability, JAX substrate)."""
    import optax
    from tensorflow_probability.substrates import jax as tfp

    tfb, tfd = tfp.bijectors, tfp.distributions
    half = dims // 2

    def flow(params):
        bijectors = []
        for i, net in enumerate(params):
            def shift_and_log_scale(x, units, net=net):
                out = mlp(net, x, jax.nn.relu)
                return out[..., :units], jnp.tanh(out[..., units:])

            bijectors.append(tfb.RealNVP(num_masked=half, shift_and_log_scale_fn=shift_and_log_scale))
            bijectors.append(tfb.Permute(np.roll(np.arange(dims), i + 1)))
        base = tfd.MultivariateNormalDiag(jnp.zeros(dims), jnp.ones(dims))
        return tfd.TransformedDistribution(base, tfb.Chain(bijectors[::-1]))

    def loss(params, x):
        return -jnp.mean(flow(params).log_prob(x))

    def init(key):
        keys = jax.random.split(key, layers)
        return [mlp_init(k, (half, hidden, hidden, 2 * (dims - half))) for k in keys]

    update, state = train(optax.adam(1e-3), loss, shapes(init))
    return update, (*state, f32(batch, dims))


def tfp_gp_hyperparameter_step(points: int, dims: int, test_points: int):
    """Adam step on ARD Matern GP hyperparameters, predictions (tensorflow-probability, JAX substrate)."""
    import optax
    from tensorflow_probability.substrates import jax as tfp

    tfd, psd = tfp.distributions, tfp.math.psd_kernels

    def kernel(params):
        base = psd.MaternFiveHalves(amplitude=jax.nn.softplus(params["amplitude"]))
        return psd.FeatureScaled(base, scale_diag=jax.nn.softplus(params["length_scales"]))

    def neg_log_marginal(params, x, y):
        gp = tfd.GaussianProcess(kernel(params), index_points=x,
                                 observation_noise_variance=jax.nn.softplus(params["noise"]) + 1e-4)
        return -gp.log_prob(y) / points

    opt = optax.adam(5e-2)

    def step(params, opt_state, x, y, x_test):
        params, opt_state, loss = apply_grads(opt, neg_log_marginal, params, opt_state, x, y)
        posterior = tfd.GaussianProcessRegressionModel(
            kernel(params), index_points=x_test, observation_index_points=x, observations=y,
            observation_noise_variance=jax.nn.softplus(params["noise"]) + 1e-4)
        return params, opt_state, loss, posterior.mean(), posterior.stddev()

    params = {"amplitude": f32(), "length_scales": f32(dims), "noise": f32()}
    return step, (params, jax.eval_shape(opt.init, params), f32(points, dims), f32(points),
                  f32(test_points, dims))


def tfp_sts_vi_forecast(length: int, seasons: int, fit_steps: int, horizon: int):
    """A trend + seasonal + AR time series fitted by VI, forecast (tensorflow-probability, JAX substrate)."""
    import optax
    from tensorflow_probability.substrates import jax as tfp

    sts = tfp.sts

    def run(series, key):
        model = sts.Sum([sts.LocalLinearTrend(observed_time_series=series),
                         sts.Seasonal(num_seasons=seasons, observed_time_series=series),
                         sts.Autoregressive(order=1, observed_time_series=series)],
                        observed_time_series=series)
        init_fn, build_fn = sts.build_factored_surrogate_posterior_stateless(model)
        k_init, k_fit, k_draw = jax.random.split(key, 3)
        params, losses = tfp.vi.fit_surrogate_posterior_stateless(
            model.joint_distribution(series).log_prob, build_fn, init_fn(seed=k_init),
            optimizer=optax.adam(0.1), num_steps=fit_steps, seed=k_fit)
        draws = build_fn(*params).sample(32, seed=k_draw)
        forecast = sts.forecast(model, series, parameter_samples=draws, num_steps_forecast=horizon)
        return losses, forecast.mean()[..., 0], forecast.stddev()[..., 0]

    return run, (f32(length), KEY)


# ------------------------------------------------------------------------------------- jaxoplanet


def jaxoplanet_transit_batch(planets: int, points: int, exposure_samples: int):
    """Quadratic limb-darkened transit light curves of many planets, exposure-time integrated (jaxoplanet)."""
    from jaxoplanet.light_curves import limb_dark_light_curve, transforms
    from jaxoplanet.orbits import TransitOrbit

    def run(period, duration, t0, impact, radius_ratio, u, time):
        orbit = TransitOrbit(period=period, duration=duration, time_transit=t0, impact_param=impact,
                             radius_ratio=radius_ratio)
        light_curve = transforms.integrate(limb_dark_light_curve(orbit, u), exposure_time=0.02,
                                           num_samples=exposure_samples)
        flux = light_curve(time)
        return flux, 1.0 + flux.sum(-1)

    p = f32(planets)
    return run, (p, p, p, p, p, f32(2), f32(points))


def _kepler_system(params):
    """A star (mass, radius) with one eccentric planet (sqrt(e) cos w, sqrt(e) sin w parametrisation)."""
    from jaxoplanet.orbits.keplerian import Central, System

    h, k = params["secosw"], params["sesinw"]
    star = Central(mass=jnp.exp(params["log_mass"]), radius=jnp.exp(params["log_rstar"]))
    return System(star).add_body(time_transit=params["t0"], period=jnp.exp(params["log_period"]),
                                 radius=jnp.exp(params["log_rp"]), impact_param=params["b"],
                                 eccentricity=h**2 + k**2, omega_peri=jnp.arctan2(k, h),
                                 radial_velocity_semiamplitude=jnp.exp(params["log_k"]))


def jaxoplanet_joint_rv_transit_step(transit_points: int, rv_points: int):
    """Adam step of a joint transit + radial-velocity likelihood of an eccentric planet (jaxoplanet)."""
    import optax
    from jaxoplanet.light_curves import limb_dark_light_curve

    def neg_log_like(params, t_lc, flux, flux_err, t_rv, rv, rv_err):
        system = _kepler_system(params)
        u = jnp.stack([params["q1"], params["q2"]])
        model_flux = 1.0 + limb_dark_light_curve(system, u)(t_lc)[:, 0]
        model_rv = system.radial_velocity(t_rv)[:, 0] + params["rv_offset"]
        chi_lc = jnp.sum(((flux - model_flux) / flux_err) ** 2)
        chi_rv = jnp.sum(((rv - model_rv) / rv_err) ** 2)
        return 0.5 * (chi_lc + chi_rv)

    names = ("t0", "log_period", "log_rp", "b", "secosw", "sesinw", "log_k", "log_mass", "log_rstar", "q1",
             "q2", "rv_offset")
    update, state = train(optax.adam(1e-3), neg_log_like, {n: f32() for n in names})
    return update, (*state, f32(transit_points), f32(transit_points), f32(transit_points), f32(rv_points),
                    f32(rv_points), f32(rv_points))


def jaxoplanet_period_search(periods: int, durations: int, points: int):
    """Transit search: chi-square with profiled depth on a period x duration grid, vmapped (jaxoplanet)."""
    from jaxoplanet.light_curves import limb_dark_light_curve
    from jaxoplanet.orbits import TransitOrbit

    def chi2(period, duration, t0, u, time, flux, flux_err):
        orbit = TransitOrbit(period=period, duration=duration, time_transit=t0, impact_param=0.3,
                             radius_ratio=0.1)
        template = limb_dark_light_curve(orbit, u)(time)
        w = 1.0 / flux_err**2
        depth = jnp.sum(w * template * (flux - 1.0)) / (jnp.sum(w * template**2) + 1e-12)
        return jnp.sum(w * (flux - 1.0 - depth * template) ** 2), depth

    def search(period_grid, duration_grid, t0, u, time, flux, flux_err):
        row = jax.vmap(chi2, in_axes=(None, 0, None, None, None, None, None))
        grid = jax.vmap(row, in_axes=(0, None, None, None, None, None, None))
        chi, depth = grid(period_grid, duration_grid, t0, u, time, flux, flux_err)
        best = jnp.argmin(chi)
        return chi, depth.reshape(-1)[best], period_grid[best // durations], duration_grid[best % durations]

    return search, (f32(periods), f32(durations), f32(), f32(2), f32(points), f32(points), f32(points))


# ----------------------------------------------------------------------------------------- coreax


def coreax_kernel_herding_mmd(points: int, dims: int, coreset: int, block_size: int = 256):
    """Kernel herding coresubset of a dataset, its MMD against the data and a random sample's (coreax)."""
    from coreax import MMD, Data, SquaredExponentialKernel
    from coreax.solvers import KernelHerding, RandomSample

    kernel = SquaredExponentialKernel(length_scale=float(np.sqrt(dims)))

    def run(x, key):
        data = Data(x)
        herded, _ = KernelHerding(coreset, kernel=kernel, block_size=block_size).reduce(data)
        sampled, _ = RandomSample(coreset, random_key=key).reduce(data)
        mmd = MMD(kernel)
        return (herded.unweighted_indices, mmd.compute(data, herded.points, block_size=block_size),
                mmd.compute(data, sampled.points, block_size=block_size))

    return run, (f32(points, dims), KEY)


def coreax_stein_thinning_ksd(points: int, dims: int, coreset: int, components: int):
    """Stein thinning of samples towards a Gaussian mixture (PCIMQ Stein kernel), then the KSD (coreax)."""
    from coreax import KSD, Data, PCIMQKernel, SteinKernel
    from coreax.solvers import SteinThinning

    def run(samples, means, log_weights):
        def log_density(x):
            return jax.scipy.special.logsumexp(
                jax.nn.log_softmax(log_weights) - 0.5 * jnp.sum((x - means) ** 2, axis=-1))

        score = jax.vmap(jax.grad(log_density))
        kernel = SteinKernel(PCIMQKernel(length_scale=1.0), score_function=score)
        data = Data(samples)
        thinned, _ = SteinThinning(coreset, kernel=kernel, regularise=False, block_size=512).reduce(data)
        ksd = KSD(kernel).compute(data, thinned.points)
        return thinned.unweighted_indices, ksd

    return run, (f32(points, dims), f32(components, dims), f32(components))


def coreax_kernel_thinning_compress(points: int, dims: int, coreset: int):
    """Kernel thinning (KT-split halving, KT-swap) of a dataset, then the coreset's MMD (coreax)."""
    from coreax import MMD, Data, SquaredExponentialKernel
    from coreax.solvers import KernelThinning

    length = float(np.sqrt(dims))
    kernel = SquaredExponentialKernel(length_scale=length)
    # the square-root kernel of a Gaussian is a Gaussian with a shorter length scale
    sqrt_kernel = SquaredExponentialKernel(length_scale=length / np.sqrt(2.0))

    def run(x, key):
        data = Data(x)
        thinned, _ = KernelThinning(coreset_size=coreset, kernel=kernel, random_key=key, delta=0.05,
                                    sqrt_kernel=sqrt_kernel).reduce(data)
        return thinned.unweighted_indices, MMD(kernel).compute(data, thinned.points)

    return run, (f32(points, dims), KEY)


# ------------------------------------------------------------------------------------------ navix


def _navix(env_id: str, num_envs: int, observation: str = "symbolic_first_person", max_steps: int = 100):
    """(env, abstract timesteps of `num_envs` reset envs)."""
    import navix as nx

    env = nx.make(env_id, max_steps=max_steps, observation_fn=getattr(nx.observations, observation))
    return env, jax.eval_shape(lambda: jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs)))


def navix_random_rollout(env_id: str, num_envs: int, steps: int):
    """Uniform-random actions in a batch of auto-resetting MiniGrid envs, scan over steps (navix)."""
    env, timestep = _navix(env_id, num_envs)
    actions = env.action_space.n

    def rollout(timestep, key):
        def step(timestep, key):
            action = jax.random.randint(key, (num_envs,), 0, actions)
            timestep = jax.vmap(env.step)(timestep, action)
            return timestep, (timestep.reward, timestep.is_done())

        timestep, (rewards, dones) = jax.lax.scan(step, timestep, jax.random.split(key, steps))
        return timestep, rewards.sum(0), dones.sum()

    return rollout, (timestep, KEY)


def navix_ppo_update(env_id: str, num_envs: int, steps: int, epochs: int = 4, hidden: int = 64):
    """PPO: MLP actor-critic rollout on egocentric symbolic views, GAE, clipped-surrogate epochs (navix)."""
    import optax

    env, timestep = _navix(env_id, num_envs)
    obs_dim, actions = int(np.prod(timestep.observation.shape[1:])), env.action_space.n
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(2.5e-4))

    def heads(net, obs):
        x = obs.reshape(*obs.shape[:-3], -1).astype(jnp.float32) / 10.0
        return mlp(net["pi"], x), mlp(net["v"], x)[..., 0]

    def loss_fn(net, traj, adv, targets):
        logits, values = heads(net, traj["obs"])
        loss = clipped_surrogate(logits, values, traj, adv, targets)
        entropy = -jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), -1)
        return loss - 0.01 * entropy.mean()

    def update(net, opt_state, timestep, key):
        def step(timestep, key):
            logits, value = heads(net, timestep.observation)
            action = jax.random.categorical(key, logits)
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[..., None], -1)[..., 0]
            nxt = jax.vmap(env.step)(timestep, action)
            return nxt, dict(obs=timestep.observation, action=action, logp=logp, value=value,
                             reward=nxt.reward, done=nxt.is_done())

        k_roll, k_epochs = jax.random.split(key)
        timestep, traj = jax.lax.scan(step, timestep, jax.random.split(k_roll, steps))
        adv, targets = gae(traj["reward"], traj["value"], traj["done"], heads(net, timestep.observation)[1])

        def epoch(carry, _):
            net, opt_state = carry
            net, opt_state, loss = apply_grads(opt, loss_fn, net, opt_state, traj, adv, targets)
            return (net, opt_state), loss

        (net, opt_state), losses = jax.lax.scan(epoch, (net, opt_state), None, length=epochs)
        return net, opt_state, timestep, losses

    net = shapes(lambda k: {"pi": mlp_init(k, (obs_dim, hidden, hidden, actions)),
                            "v": mlp_init(jax.random.fold_in(k, 1), (obs_dim, hidden, hidden, 1))})
    return update, (net, jax.eval_shape(opt.init, net), timestep, KEY)


def navix_dqn_step(env_id: str, num_envs: int, steps: int, width: int = 32):
    """DQN: epsilon-greedy conv Q-network rollout on categorical views, double-Q TD Adam step (navix)."""
    import optax

    env, timestep = _navix(env_id, num_envs, observation="categorical_first_person")
    actions = env.action_space.n
    opt = optax.adam(1e-4)

    def q_values(params, obs):
        # one-hot tile categories through two 3x3 convolutions, an MLP head
        x = jax.nn.one_hot(obs, 16)
        for kernel in params["convs"]:
            x = jax.nn.relu(jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                                         dimension_numbers=("NHWC", "HWIO", "NHWC")))
        return mlp(params["head"], x.reshape(x.shape[0], -1), jax.nn.relu)

    def td_loss(params, target, obs, action, reward, done, next_obs):
        q = jnp.take_along_axis(q_values(params, obs), action[:, None], -1)[:, 0]
        next_action = jnp.argmax(q_values(params, next_obs), -1)
        next_q = jnp.take_along_axis(q_values(target, next_obs), next_action[:, None], -1)[:, 0]
        y = reward + 0.99 * (1.0 - done) * jax.lax.stop_gradient(next_q)
        return jnp.mean(optax.huber_loss(q, y))

    def update(params, target, opt_state, timestep, epsilon, key):
        def step(timestep, key):
            k_eps, k_act = jax.random.split(key)
            greedy = jnp.argmax(q_values(params, timestep.observation), -1)
            explore = jax.random.uniform(k_eps, (num_envs,)) < epsilon
            action = jnp.where(explore, jax.random.randint(k_act, (num_envs,), 0, actions), greedy)
            nxt = jax.vmap(env.step)(timestep, action)
            return nxt, (timestep.observation, action, nxt.reward, nxt.is_done().astype(jnp.float32),
                         nxt.observation)

        timestep, batch = jax.lax.scan(step, timestep, jax.random.split(key, steps))
        batch = jax.tree.map(lambda x: x.reshape(steps * num_envs, *x.shape[2:]), batch)
        params, opt_state, loss = apply_grads(opt, td_loss, params, opt_state, target, *batch)
        target = jax.tree.map(lambda t, p: 0.99 * t + 0.01 * p, target, params)
        return params, target, opt_state, timestep, loss

    h, w = timestep.observation.shape[1:3]

    def init(key):
        k1, k2, k3 = jax.random.split(key, 3)
        return {"convs": [jax.random.normal(k1, (3, 3, 16, width)) / 12.0,
                          jax.random.normal(k2, (3, 3, width, width)) / np.sqrt(9 * width)],
                "head": mlp_init(k3, (h * w * width, 256, actions))}

    params = shapes(init)
    return update, (params, params, jax.eval_shape(opt.init, params), timestep, f32(), KEY)


# ------------------------------------------------------------------------------------ jax-finufft


def finufft_fourier_fit_step(modes: int, samples: int):
    """Adam step fitting 2-D Fourier coefficients to scattered samples by a type-2 NUFFT (jax-finufft)."""
    import optax
    from jax_finufft import nufft2

    def loss(coeffs, x, y, values):
        c = jax.lax.complex(coeffs[0], coeffs[1])
        model = nufft2(c, x, y, eps=1e-6).real
        k = jnp.fft.fftshift(jnp.fft.fftfreq(modes)) * modes
        smooth = (1.0 + k[:, None] ** 2 + k[None, :] ** 2) * jnp.abs(c) ** 2
        return jnp.mean((model - values) ** 2) + 1e-6 * smooth.sum()

    update, state = train(optax.adam(1e-2), loss, f32(2, modes, modes))
    return update, (*state, f32(samples), f32(samples), f32(samples))


def finufft_radial_mri_cg(size: int, spokes: int, readout: int, coils: int, iterations: int):
    """Multi-coil radial MRI reconstruction by conjugate gradients on NUFFT normal equations (jax-finufft)."""
    from jax_finufft import nufft1, nufft2

    def run(kspace, sensitivities, kx, ky, density):
        def forward(image):
            # image -> per-coil k-space samples at the radial trajectory (type 2)
            return nufft2(sensitivities * image[None], kx, ky, eps=1e-5)

        def adjoint(samples):
            # density-compensated type-1 gridding, coil combination
            grids = nufft1((size, size), samples * density, kx, ky, eps=1e-5)
            return jnp.sum(jnp.conj(sensitivities) * grids, axis=0)

        def normal(image):
            return adjoint(forward(image)) + 1e-3 * image

        b = adjoint(kspace)

        def cg(_, carry):
            x, r, p, rr = carry
            ap = normal(p)
            alpha = rr / jnp.real(jnp.vdot(p, ap))
            x, r = x + alpha * p, r - alpha * ap
            rr_new = jnp.real(jnp.vdot(r, r))
            return x, r, r + (rr_new / rr) * p, rr_new

        x0 = jnp.zeros_like(b)
        x, r, _, _ = jax.lax.fori_loop(0, iterations, cg, (x0, b, b, jnp.real(jnp.vdot(b, b))))
        return jnp.abs(x), jnp.linalg.norm(r)

    n = spokes * readout
    return run, (c64(coils, n), c64(coils, size, size), f32(n), f32(n), f32(n))


def finufft_lomb_scargle_batch(stars: int, samples: int, frequencies: int):
    """Batched Lomb-Scargle periodograms of irregularly sampled series by type-1 NUFFTs (jax-finufft)."""
    from jax_finufft import nufft1

    def periodogram(t, y, dy):
        # map times to [-pi, pi); the trigonometric sums at integer frequencies are type-1 NUFFTs,
        # batched over stars by the library's broadcasting (its vmap rule fails on this jax)
        t0, span = t.min(-1, keepdims=True), jnp.ptp(t, axis=-1, keepdims=True)
        phase = 2.0 * jnp.pi * (t - t0) / span - jnp.pi
        w = 1.0 / dy**2
        w = w / w.sum(-1, keepdims=True)
        y = y - jnp.sum(w * y, -1, keepdims=True)
        sums_y = nufft1(2 * frequencies + 1, (w * y).astype(jnp.complex64), phase, eps=1e-6)
        sums_w = nufft1(4 * frequencies + 1, w.astype(jnp.complex64), phase, eps=1e-6)
        sums_y, sums_2w = sums_y[:, frequencies + 1:], sums_w[:, 2 * frequencies + 2::2]
        c2, s2 = sums_2w.real, sums_2w.imag
        tau = 0.5 * jnp.arctan2(s2, c2)
        yc = sums_y.real * jnp.cos(tau) + sums_y.imag * jnp.sin(tau)
        ys = sums_y.imag * jnp.cos(tau) - sums_y.real * jnp.sin(tau)
        cc = 0.5 * (1.0 + c2 * jnp.cos(2 * tau) + s2 * jnp.sin(2 * tau))
        power = (yc**2 / cc + ys**2 / (1.0 - cc)) / jnp.sum(w * y**2, -1, keepdims=True)
        return power, jnp.argmax(power, -1)

    return periodogram, (f32(stars, samples), f32(stars, samples), f32(stars, samples))


# ------------------------------------------------------------------------------------------ fdtdx


def _fdtdx_scene(n: int, depth: int, femtoseconds: float, gradient: bool):
    """A PML-bounded volume with a Gaussian plane source above a permittivity device and an
    energy detector below it, placed by fdtdx (outside any trace). Returns (objects, config,
    abstract arrays, abstract device parameters); the placed arrays become abstract arguments."""
    import fdtdx

    config = fdtdx.SimulationConfig(time=femtoseconds * 1e-15, grid=fdtdx.UniformGrid(spacing=50e-9),
                                    backend="cpu", dtype=jnp.float32)
    if gradient:
        recorder = fdtdx.Recorder(modules=[fdtdx.DtypeConversion(dtype=jnp.bfloat16)])
        config = config.aset("gradient_config", fdtdx.GradientConfig(method="reversible", recorder=recorder))
    volume = fdtdx.SimulationVolume(partial_grid_shape=(n, n, depth))
    boundaries, constraints = fdtdx.boundary_objects_from_config(
        fdtdx.BoundaryConfig.from_uniform_bound(thickness=6, boundary_type="pml"), volume)
    source = fdtdx.GaussianPlaneSource(
        partial_grid_shape=(None, None, 1), partial_real_shape=(0.4 * n * 50e-9, 0.4 * n * 50e-9, None),
        fixed_E_polarization_vector=(1, 0, 0), wave_character=fdtdx.WaveCharacter(wavelength=1.0e-6),
        radius=0.2 * n * 50e-9, std=1 / 3, direction="-")
    device = fdtdx.Device(
        name="device", partial_grid_shape=(n // 2, n // 2, 4),
        materials={"air": fdtdx.Material(permittivity=1.0), "silicon": fdtdx.Material(permittivity=12.0)},
        param_transforms=[fdtdx.GaussianSmoothing2D(std_discrete=1),
                          fdtdx.StandardToInversePermittivityRange()],
        partial_voxel_grid_shape=(1, 1, 4))
    detector = fdtdx.EnergyDetector(name="energy", partial_grid_shape=(None, None, 1),
                                    partial_real_shape=(0.2 * n * 50e-9, 0.2 * n * 50e-9, None))
    constraints = [*constraints,
                   source.place_relative_to(volume, axes=(0, 1, 2), own_positions=(0, 0, 1),
                                            other_positions=(0, 0, 1), grid_margins=(0, 0, -8)),
                   device.place_at_center(volume),
                   detector.place_relative_to(volume, axes=(0, 1, 2), own_positions=(0, 0, -1),
                                              other_positions=(0, 0, -1), grid_margins=(0, 0, 8))]
    objects, arrays, params, config, _ = fdtdx.place_objects(
        [volume, *boundaries.values(), source, device, detector], config, constraints, jax.random.PRNGKey(0))

    def abstract(x):
        return jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x))

    return objects, config, jax.tree.map(abstract, arrays), jax.tree.map(abstract, params)


def fdtdx_device_forward(n: int, depth: int, femtoseconds: float):
    """Forward 3-D FDTD run (PML, Gaussian source) through a permittivity device, detector energy (fdtdx)."""
    import fdtdx

    objects, config, arrays, params = _fdtdx_scene(n, depth, femtoseconds, gradient=False)

    def run(params, arrays, key):
        arrays, placed, _ = fdtdx.apply_params(arrays, objects, params, key)
        _, arrays = fdtdx.run_fdtd(arrays=arrays, objects=placed, config=config, key=key, show_progress=False)
        return arrays.detector_states["energy"]["energy"].sum(), arrays.fields

    return run, (params, arrays, KEY)


def fdtdx_inverse_design_step(n: int, depth: int, femtoseconds: float):
    """Inverse design: Adam step on device densities, grad through a time-reversible FDTD run (fdtdx)."""
    import fdtdx
    import optax

    objects, config, arrays, params = _fdtdx_scene(n, depth, femtoseconds, gradient=True)
    opt = optax.adam(1e-2)

    def loss(params, arrays, key):
        arrays, placed, _ = fdtdx.apply_params(arrays, objects, params, key)
        _, arrays = fdtdx.run_fdtd(arrays=arrays, objects=placed, config=config, key=key, show_progress=False)
        return -arrays.detector_states["energy"]["energy"].sum()

    def step(params, opt_state, arrays, key):
        params, opt_state, value = apply_grads(opt, loss, params, opt_state, arrays, key)
        return jax.tree.map(lambda p: jnp.clip(p, 0.0, 1.0), params), opt_state, value

    return step, (params, jax.eval_shape(opt.init, params), arrays, KEY)


# (builder, sizes) of each program measured
PROGRAMS = (
    (probdiffeq_adaptive_batch, dict(num_derivatives=4, save_points=50, batch=8)),
    (probdiffeq_adaptive_batch, dict(num_derivatives=5, save_points=200, batch=32)),
    (probdiffeq_lml_fit_step, dict(num_derivatives=3, grid_points=100)),
    (probdiffeq_fpu_chain_terminal, dict(masses=32, num_derivatives=4)),
    (probdiffeq_fpu_chain_terminal, dict(masses=16, num_derivatives=3, ssm="blockdiag")),
    (tfp_nuts_hierarchical_logistic, dict(features=5, groups=8, points=400, chains=4, steps=200)),
    (tfp_realnvp_flow_step, dict(dims=8, layers=4, hidden=64, batch=256)),
    (tfp_realnvp_flow_step, dict(dims=16, layers=8, hidden=128, batch=512)),
    (tfp_gp_hyperparameter_step, dict(points=256, dims=4, test_points=64)),
    (tfp_sts_vi_forecast, dict(length=200, seasons=7, fit_steps=100, horizon=14)),
    (jaxoplanet_transit_batch, dict(planets=8, points=2000, exposure_samples=7)),
    (jaxoplanet_joint_rv_transit_step, dict(transit_points=1000, rv_points=50)),
    (jaxoplanet_period_search, dict(periods=64, durations=8, points=1000)),
    (jaxoplanet_period_search, dict(periods=256, durations=16, points=4000)),
    (coreax_kernel_herding_mmd, dict(points=4096, dims=4, coreset=64)),
    (coreax_stein_thinning_ksd, dict(points=2048, dims=2, coreset=50, components=4)),
    (coreax_kernel_thinning_compress, dict(points=1024, dims=3, coreset=32)),
    (coreax_kernel_thinning_compress, dict(points=4096, dims=8, coreset=64)),
    (navix_random_rollout, dict(env_id="Navix-DoorKey-8x8-v0", num_envs=16, steps=64)),
    (navix_random_rollout, dict(env_id="Navix-FourRooms-v0", num_envs=64, steps=128)),
    (navix_ppo_update, dict(env_id="Navix-KeyCorridorS3R1-v0", num_envs=16, steps=32)),
    (navix_dqn_step, dict(env_id="Navix-Dynamic-Obstacles-6x6-v0", num_envs=16, steps=16)),
    (finufft_fourier_fit_step, dict(modes=64, samples=20000)),
    (finufft_radial_mri_cg, dict(size=64, spokes=64, readout=128, coils=4, iterations=10)),
    (finufft_lomb_scargle_batch, dict(stars=16, samples=2000, frequencies=1000)),
    (fdtdx_device_forward, dict(n=40, depth=40, femtoseconds=40.0)),
    (fdtdx_device_forward, dict(n=56, depth=48, femtoseconds=60.0)),
    (fdtdx_inverse_design_step, dict(n=32, depth=32, femtoseconds=30.0)),
)
# the pip package of each builder name's prefix
LIBRARIES = {"probdiffeq": "probdiffeq", "tfp": "tensorflow-probability", "jaxoplanet": "jaxoplanet",
             "coreax": "coreax", "fdtdx": "fdtdx", "navix": "navix", "finufft": "jax-finufft"}

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES),
                                     prefix="outside_d2")
