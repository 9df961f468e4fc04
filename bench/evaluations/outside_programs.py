"""Programs for `bench/evaluations/outside_libraries.py`: built with public JAX libraries that no corpus
family, other bench or training row uses, as their users write them. Each builder returns
a new function and abstract arguments (parameters, states and keys are arguments, not
captured constants); `OUTSIDE_FAMILIES` registers one family per builder, its grid the
sizes measured, so measurement processes build them as they build corpus programs.

- evosax: SNES on a regression MLP, CMA-ES neuroevolution of a CartPole policy (gymnax),
  OpenAI-ES with Adam on MinAtar Breakout.
- pgx: a vmapped tic-tac-toe step, an MLP-policy connect-four rollout (while_loop), random
  rollouts of go 9x9 and chess (scan).
- rlax + gymnax: batched lambda / GAE / n-step returns, an IMPALA V-trace loss gradient, PPO
  updates (GAE, clipped surrogate) on CartPole (nested scans) and MinAtar Breakout
  (Python-unrolled epochs x minibatches).
- distrax: categorical policy KL / entropy, Gaussian REINFORCE gradient, tanh-Gaussian SAC
  actor loss, rational-quadratic-spline coupling-flow training steps (4 / 10 / 20 layers).
- mctx: MuZero search with a learned model, Gumbel MuZero (AlphaZero-style) self-play on
  pgx connect four and chess.
- jraph: one-layer GCN inference, GCN and GAT node-classification train steps, a
  GraphNetwork (MPNN) graph-regression train step with Python-unrolled message passing.
- jax-md: Lennard-Jones energy and forces, an LJ NVE simulation in `lax.fori_loop`, a
  soft-sphere FIRE minimisation with a neighbour list, the gradient through a
  Python-unrolled NVE trajectory.
- ott-jax: Sinkhorn cost between point clouds, a Sinkhorn-divergence gradient flow,
  entropic Gromov-Wasserstein.
- jaxopt: projected-gradient NNLS, L-BFGS logistic regression, an implicit-diff
  hypergradient through a solver, an L-BFGS fit of a deep MLP.
- dm-pix: SSIM and PSNR, a CNN train step on a vmapped augmentation pipeline, a
  SimCLR-style multi-view contrastive train step.

Policy, value and conditioner networks are plain jax.numpy MLPs; optax supplies optimizers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders, sds


def f32(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape)


def i32(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape, np.int32)


KEY = jax.ShapeDtypeStruct((2,), jnp.uint32)


def _mlp_init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        {"w": jax.random.normal(k, (a, b)) / np.sqrt(a), "b": jnp.zeros(b)}
        for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]


def _mlp(params, x, act=jnp.tanh):
    for layer in params[:-1]:
        x = act(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def _mlp_shapes(*sizes):
    return jax.eval_shape(lambda: _mlp_init(jax.random.PRNGKey(0), sizes))


def _zeros_like(shapes):
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _flat(x):
    return x.reshape(x.shape[0], -1)


# ----------------------------------------------------------------------------------------- evosax


def evosax_snes_regression(generations: int, popsize: int):
    """SNES ask/evaluate/tell generations in lax.scan, fitness = MSE of a small MLP regressor."""
    from evosax.algorithms import SNES

    shapes = _mlp_shapes(8, 32, 1)
    es = SNES(population_size=popsize, solution=_zeros_like(shapes))
    es_params = jax.eval_shape(lambda: es.default_params)

    def fn(key, init_mean, es_params, xs, ys):
        def loss(p):
            return jnp.mean((_mlp(p, xs)[:, 0] - ys) ** 2)

        state = es.init(key, init_mean, es_params)

        def generation(state, key):
            k_ask, k_tell = jax.random.split(key)
            population, state = es.ask(k_ask, state, es_params)
            fitness = jax.vmap(loss)(population)
            state, metrics = es.tell(k_tell, population, fitness, state, es_params)
            return state, metrics["best_fitness"]

        state, curve = jax.lax.scan(generation, state, jax.random.split(key, generations))
        return es.get_mean(state), curve

    return fn, (KEY, shapes, es_params, f32(256, 8), f32(256))


def _gymnax_episode_return(env, env_params, policy_params, key, steps, deterministic=True):
    """Sum of rewards of one (auto-resetting) gymnax episode under a jnp MLP policy."""
    obs, state = env.reset(key, env_params)

    def step(carry, key):
        obs, state, ret, alive = carry
        k_act, k_step = jax.random.split(key)
        logits = _mlp(policy_params, obs.reshape(-1))
        action = jnp.argmax(logits) if deterministic else jax.random.categorical(k_act, logits)
        obs, state, reward, terminated, truncated, _ = env.step(k_step, state, action, env_params)
        done = terminated | truncated
        ret = ret + reward * alive
        alive = alive * (1.0 - done)
        return (obs, state, ret, alive), None

    (_, _, ret, _), _ = jax.lax.scan(step, (obs, state, 0.0, 1.0), jax.random.split(key, steps))
    return ret


def evosax_cma_es_cartpole(generations: int, popsize: int, steps: int):
    """CMA-ES neuroevolution of a CartPole MLP policy, gymnax rollouts as fitness, generations in scan."""
    import gymnax
    from evosax.algorithms import CMA_ES

    env, env_params = gymnax.make("CartPole-v1")
    shapes = _mlp_shapes(4, 16, 2)
    es = CMA_ES(population_size=popsize, solution=_zeros_like(shapes))
    es_params = jax.eval_shape(lambda: es.default_params)

    def fn(key, init_mean, es_params):
        state = es.init(key, init_mean, es_params)

        def generation(state, key):
            k_ask, k_eval, k_tell = jax.random.split(key, 3)
            population, state = es.ask(k_ask, state, es_params)
            keys = jax.random.split(k_eval, popsize)
            returns = jax.vmap(lambda p, k: _gymnax_episode_return(env, env_params, p, k, steps))(
                population, keys
            )
            state, metrics = es.tell(k_tell, population, -returns, state, es_params)
            return state, (metrics["best_fitness"], jnp.mean(returns))

        state, curve = jax.lax.scan(generation, state, jax.random.split(key, generations))
        return es.get_mean(state), curve

    return fn, (KEY, shapes, es_params)


def evosax_open_es_minatar(generations: int, popsize: int, steps: int, rollouts: int):
    """OpenAI-ES with Adam on a MinAtar Breakout conv-free MLP policy, several rollouts per member."""
    import gymnax
    import optax
    from evosax.algorithms import Open_ES

    env, env_params = gymnax.make("Breakout-MinAtar")
    obs_dim = int(np.prod(env.observation_space(env_params).shape))
    shapes = _mlp_shapes(obs_dim, 64, 64, env.num_actions)
    es = Open_ES(
        population_size=popsize,
        solution=_zeros_like(shapes),
        optimizer=optax.adam(learning_rate=0.01),
        std_schedule=optax.exponential_decay(0.05, 1, 0.999),
    )
    es_params = jax.eval_shape(lambda: es.default_params)

    def fn(key, init_mean, es_params):
        state = es.init(key, init_mean, es_params)

        def evaluate(p, key):
            keys = jax.random.split(key, rollouts)
            rets = jax.vmap(lambda k: _gymnax_episode_return(env, env_params, p, k, steps, False))(keys)
            return jnp.mean(rets)

        def generation(state, key):
            k_ask, k_eval, k_tell = jax.random.split(key, 3)
            population, state = es.ask(k_ask, state, es_params)
            returns = jax.vmap(evaluate)(population, jax.random.split(k_eval, popsize))
            state, metrics = es.tell(k_tell, population, -returns, state, es_params)
            return state, metrics["best_fitness"]

        state, curve = jax.lax.scan(generation, state, jax.random.split(key, generations))
        return es.get_mean(state), curve

    return fn, (KEY, shapes, es_params)


# -------------------------------------------------------------------------------------------- pgx


def pgx_random_rollout(game: str, batch: int, steps: int):
    """Vmapped uniform-random-legal-action self-play of a pgx game for a fixed number of plies."""
    import pgx
    from pgx.experimental import auto_reset

    env = pgx.make(game)

    def fn(key):
        k_init, k_play = jax.random.split(key)
        state = jax.vmap(env.init)(jax.random.split(k_init, batch))

        def ply(state, key):
            k_act, k_step = jax.random.split(key)
            logits = jnp.log(state.legal_action_mask.astype(jnp.float32))
            action = jax.random.categorical(k_act, logits, axis=-1)
            state = jax.vmap(auto_reset(env.step, env.init))(state, action, jax.random.split(k_step, batch))
            return state, (state.rewards, state.terminated)

        state, (rewards, terminated) = jax.lax.scan(ply, state, jax.random.split(k_play, steps))
        return rewards.sum(0), terminated.sum()

    return fn, (KEY,)


def pgx_vmapped_step(game: str, batch: int):
    """A single jitted vmapped pgx env.step on a batch of game states."""
    import pgx

    env = pgx.make(game)
    state_shapes = jax.eval_shape(
        lambda k: jax.vmap(env.init)(jax.random.split(k, batch)), jax.random.PRNGKey(0)
    )

    def fn(state, action):
        return jax.vmap(env.step)(state, action)

    return fn, (state_shapes, i32(batch))


def pgx_policy_rollout(game: str, batch: int, max_steps: int, hidden: int):
    """Batched pgx self-play with a two-headed MLP policy in a while_loop until all games end."""
    import pgx

    env = pgx.make(game)
    obs_dim = int(np.prod(env.observation_shape))
    shapes = _mlp_shapes(obs_dim, hidden, hidden, env.num_actions + 1)

    def fn(params, key):
        k_init, k_play = jax.random.split(key)
        state = jax.vmap(env.init)(jax.random.split(k_init, batch))

        def cond(carry):
            state, _, _, t = carry
            return (~(state.terminated | state.truncated).all()) & (t < max_steps)

        def body(carry):
            state, key, ret, t = carry
            key, k_act = jax.random.split(key)
            out = _mlp(params, _flat(state.observation.astype(jnp.float32)), jax.nn.relu)
            logits = jnp.where(state.legal_action_mask, out[:, :-1], -1e9)
            action = jax.random.categorical(k_act, logits, axis=-1)
            state = jax.vmap(env.step)(state, action)
            return state, key, ret + state.rewards, t + 1

        state, _, ret, t = jax.lax.while_loop(cond, body, (state, k_play, jnp.zeros((batch, 2)), 0))
        return ret, t

    return fn, (shapes, KEY)


# -------------------------------------------------------------------------------------- rlax + gymnax


def rlax_batched_returns(steps: int, batch: int):
    """rlax lambda-returns, GAE and n-step targets for a [T, B] batch of trajectories (vmapped over B)."""
    import rlax

    def fn(rewards, discounts, values):
        over_b = {"in_axes": 1, "out_axes": 1}
        lam = jax.vmap(lambda r, d, v: rlax.lambda_returns(r, d, v, 0.95), **over_b)(
            rewards, discounts, values[1:]
        )
        gae = jax.vmap(
            lambda r, d, v: rlax.truncated_generalized_advantage_estimation(r, d, 0.95, v), **over_b
        )(rewards, discounts, values)
        nstep = jax.vmap(lambda r, d, v: rlax.n_step_bootstrapped_returns(r, d, v, 5), **over_b)(
            rewards, discounts, values[1:]
        )
        return lam, gae, nstep

    return fn, (f32(steps, batch), f32(steps, batch), f32(steps + 1, batch))


def rlax_impala_vtrace_loss(steps: int, batch: int, obs_dim: int, num_actions: int, hidden: int):
    """IMPALA learner loss: rlax V-trace targets/advantages, policy-gradient and entropy losses, grads."""
    import rlax

    shapes = _mlp_shapes(obs_dim, hidden, hidden, num_actions + 1)

    def fn(params, obs, actions, rewards, discounts, behaviour_logits):
        def loss_fn(params):
            out = _mlp(params, obs, jax.nn.relu)  # [T+1, B, A+1]
            logits, values = out[:-1, :, :-1], out[..., -1]
            rhos = rlax.categorical_importance_sampling_ratios(logits, behaviour_logits, actions)
            vtrace = jax.vmap(rlax.vtrace_td_error_and_advantage, in_axes=(1, 1, 1, 1, 1), out_axes=1)
            out = vtrace(values[:-1], values[1:], rewards, discounts, rhos)
            pg = jax.vmap(rlax.policy_gradient_loss, in_axes=(1, 1, 1, 1))(
                logits, actions, out.pg_advantage, jnp.ones_like(rewards)
            )
            ent = jax.vmap(rlax.entropy_loss, in_axes=(1, 1))(logits, jnp.ones_like(rewards))
            return jnp.mean(pg) + 0.5 * jnp.mean(out.errors**2) + 0.01 * jnp.mean(ent)

        return jax.value_and_grad(loss_fn)(params)

    return fn, (
        shapes,
        f32(steps + 1, batch, obs_dim),
        i32(steps, batch),
        f32(steps, batch),
        f32(steps, batch),
        f32(steps, batch, num_actions),
    )


def gymnax_ppo_update(
    env_name: str,
    num_envs: int,
    rollout: int,
    hidden: int,
    epochs: int,
    minibatches: int,
    unroll: bool = False,
):
    """PureJaxRL-style PPO update: gymnax rollout scan, rlax GAE + clipped surrogate, optax Adam epochs."""
    import gymnax
    import optax
    import rlax

    env, env_params = gymnax.make(env_name)
    obs_dim = int(np.prod(env.observation_space(env_params).shape))
    n_act = env.num_actions
    shapes = {"pi": _mlp_shapes(obs_dim, hidden, hidden, n_act), "v": _mlp_shapes(obs_dim, hidden, hidden, 1)}
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(2.5e-4, eps=1e-5))
    opt_shapes = jax.eval_shape(opt.init, shapes)
    env_state_shapes = jax.eval_shape(
        lambda k: jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k, num_envs), env_params),
        jax.random.PRNGKey(0),
    )

    def fn(params, opt_state, env_obs_state, key):
        obs, env_state = env_obs_state
        obs = _flat(obs)

        def env_step(carry, key):
            params, obs, env_state = carry
            k_act, k_step = jax.random.split(key)
            logits = _mlp(params["pi"], obs)
            value = _mlp(params["v"], obs)[:, 0]
            action = jax.random.categorical(k_act, logits)
            logp = jax.nn.log_softmax(logits)[jnp.arange(num_envs), action]
            nobs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, num_envs), env_state, action, env_params
            )
            nobs = _flat(nobs)
            return (params, nobs, env_state), (obs, action, logp, value, reward, terminated | truncated)

        key, k_roll = jax.random.split(key)
        (_, last_obs, env_state), traj = jax.lax.scan(
            env_step, (params, obs, env_state), jax.random.split(k_roll, rollout)
        )
        t_obs, t_act, t_logp, t_val, t_rew, t_done = traj
        last_val = _mlp(params["v"], last_obs)[:, 0]
        values = jnp.concatenate([t_val, last_val[None]], 0)
        discount = 0.99 * (1.0 - t_done)
        adv = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(1, 1, None, 1), out_axes=1)(
            t_rew, discount, 0.95, values
        )
        targets = adv + t_val

        batch = jax.tree.map(
            lambda x: x.reshape((rollout * num_envs,) + x.shape[2:]), (t_obs, t_act, t_logp, adv, targets)
        )

        def loss_fn(params, mb):
            obs, act, old_logp, adv, target = mb
            logits = _mlp(params["pi"], obs)
            logp_all = jax.nn.log_softmax(logits)
            logp = jnp.take_along_axis(logp_all, act[:, None], 1)[:, 0]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg = rlax.clipped_surrogate_pg_loss(jnp.exp(logp - old_logp), adv, 0.2)
            v = _mlp(params["v"], obs)[:, 0]
            v_loss = 0.5 * jnp.mean((v - target) ** 2)
            ent = jnp.mean(rlax.softmax().entropy(logits))
            return pg + 0.5 * v_loss - 0.01 * ent, (pg, v_loss, ent)

        def minibatch(carry, mb):
            params, opt_state = carry
            (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb)
            updates, opt_state = opt.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), (loss, aux)

        def shuffle(key):
            perm = jax.random.permutation(key, rollout * num_envs)
            return jax.tree.map(lambda x: x[perm].reshape((minibatches, -1) + x.shape[1:]), batch)

        def epoch(carry, key):
            return jax.lax.scan(minibatch, carry, shuffle(key))

        epoch_keys = jax.random.split(key, epochs)
        if unroll:  # CleanRL-style Python loops over epochs and minibatches
            carry, infos = (params, opt_state), []
            for e in range(epochs):
                mbs = shuffle(epoch_keys[e])
                for i in range(minibatches):
                    carry, info = minibatch(carry, jax.tree.map(lambda x, i=i: x[i], mbs))
                    infos.append(info)
            info = jax.tree.map(lambda *xs: jnp.stack(xs), *infos)
        else:  # PureJaxRL-style nested scans
            carry, info = jax.lax.scan(epoch, (params, opt_state), epoch_keys)
        params, opt_state = carry
        return params, opt_state, (last_obs, env_state), info, t_rew.sum(0)

    return fn, (shapes, opt_shapes, env_state_shapes, KEY)


# ---------------------------------------------------------------------------------------- distrax


def distrax_spline_flow_train_step(dim: int, layers: int, hidden: int, bins: int, batch: int):
    """Distrax RQS normalizing flow (MaskedCoupling chain, MLP conditioners) maximum-likelihood Adam step."""
    import distrax
    import optax

    n_params = 3 * bins + 1
    shapes = [_mlp_shapes(dim, hidden, hidden, dim * n_params) for _ in range(layers)]
    opt = optax.adam(1e-3)
    opt_shapes = jax.eval_shape(opt.init, shapes)

    def make_flow(params):
        mask = jnp.arange(dim) % 2 == 0
        bijectors = []
        for layer_params in params:

            def conditioner(x, p=layer_params):
                out = _mlp(p, x, jax.nn.relu)
                return out.reshape(x.shape[:-1] + (dim, n_params))

            def bijector_fn(p):
                return distrax.RationalQuadraticSpline(p, range_min=-5.0, range_max=5.0)

            bijectors.append(distrax.MaskedCoupling(mask=mask, bijector=bijector_fn, conditioner=conditioner))
            mask = ~mask
        base = distrax.Independent(distrax.Normal(jnp.zeros(dim), jnp.ones(dim)), 1)
        return distrax.Transformed(base, distrax.Inverse(distrax.Chain(bijectors)))

    def fn(params, opt_state, x, key):
        def loss_fn(params):
            return -jnp.mean(make_flow(params).log_prob(x))

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        samples = make_flow(params).sample(seed=key, sample_shape=(16,))
        return params, opt_state, loss, samples

    return fn, (shapes, opt_shapes, f32(batch, dim), KEY)


def distrax_policy_kl_entropy(batch: int, num_actions: int):
    """Distrax categorical policy statistics: KL to a target policy, entropy and action log-probs."""
    import distrax

    def fn(logits, target_logits, actions):
        pi = distrax.Categorical(logits=logits)
        target = distrax.Categorical(logits=target_logits)
        return pi.kl_divergence(target).mean(), pi.entropy().mean(), pi.log_prob(actions)

    return fn, (f32(batch, num_actions), f32(batch, num_actions), i32(batch))


def distrax_gaussian_reinforce_grad(batch: int, act_dim: int):
    """REINFORCE gradient of a state-independent distrax diagonal-Gaussian policy (log_prob under vmap)."""
    import distrax

    def fn(mean, log_std, actions, returns):
        def loss_fn(mean, log_std):
            def logp(a):
                return distrax.MultivariateNormalDiag(mean, jnp.exp(log_std)).log_prob(a)

            return -jnp.mean(jax.vmap(logp)(actions) * (returns - returns.mean()))

        return jax.value_and_grad(loss_fn, argnums=(0, 1))(mean, log_std)

    return fn, (f32(act_dim), f32(act_dim), f32(batch, act_dim), f32(batch))


def distrax_tanh_gaussian_actor_loss(batch: int, obs_dim: int, act_dim: int, hidden: int):
    """SAC actor loss: distrax tanh-squashed diagonal Gaussian sample_and_log_prob, Q critic, actor grads."""
    import distrax

    actor_shapes = _mlp_shapes(obs_dim, hidden, hidden, 2 * act_dim)
    critic_shapes = _mlp_shapes(obs_dim + act_dim, hidden, hidden, 1)

    def fn(actor, critic, obs, log_alpha, key):
        def loss_fn(actor):
            out = _mlp(actor, obs, jax.nn.relu)
            mu, log_std = out[:, :act_dim], jnp.clip(out[:, act_dim:], -5.0, 2.0)
            dist = distrax.Transformed(
                distrax.MultivariateNormalDiag(mu, jnp.exp(log_std)), distrax.Block(distrax.Tanh(), ndims=1)
            )
            action, log_prob = dist.sample_and_log_prob(seed=key)
            q = _mlp(critic, jnp.concatenate([obs, action], -1), jax.nn.relu)[:, 0]
            return jnp.mean(jnp.exp(log_alpha) * log_prob - q), -jnp.mean(log_prob)

        (loss, entropy), grads = jax.value_and_grad(loss_fn, has_aux=True)(actor)
        return loss, entropy, grads

    return fn, (actor_shapes, critic_shapes, f32(batch, obs_dim), f32(), KEY)


# ------------------------------------------------------------------------------------------- mctx


def mctx_muzero_search(batch: int, num_actions: int, latent: int, num_simulations: int):
    """mctx.muzero_policy with MLP representation / dynamics / prediction networks as recurrent_fn."""
    import mctx

    obs_dim = 32
    shapes = {
        "repr": _mlp_shapes(obs_dim, 128, latent),
        "dyn": _mlp_shapes(latent + num_actions, 128, latent + 1),
        "pred": _mlp_shapes(latent, 128, num_actions + 1),
    }

    def fn(params, obs, key):
        def predict(p, emb):
            out = _mlp(p["pred"], emb, jax.nn.relu)
            return out[:, :-1], out[:, -1]

        def recurrent_fn(p, rng_key, action, embedding):
            x = jnp.concatenate([embedding, jax.nn.one_hot(action, num_actions)], -1)
            out = _mlp(p["dyn"], x, jax.nn.relu)
            next_emb, reward = jnp.tanh(out[:, :-1]), out[:, -1]
            logits, value = predict(p, next_emb)
            return mctx.RecurrentFnOutput(
                reward=reward, discount=jnp.full_like(reward, 0.997), prior_logits=logits, value=value
            ), next_emb

        emb = jnp.tanh(_mlp(params["repr"], obs, jax.nn.relu))
        logits, value = predict(params, emb)
        root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=emb)
        out = mctx.muzero_policy(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=num_simulations,
            dirichlet_fraction=0.25,
            dirichlet_alpha=0.3,
        )
        return out.action, out.action_weights, out.search_tree.summary().qvalues

    return fn, (shapes, f32(batch, obs_dim), KEY)


def mctx_gumbel_alphazero_pgx(game: str, batch: int, hidden: int, num_simulations: int, moves: int):
    """AlphaZero-style self-play: mctx.gumbel_muzero_policy with the pgx step as recurrent_fn, in scan."""
    import mctx
    import pgx

    env = pgx.make(game)
    obs_dim = int(np.prod(env.observation_shape))
    shapes = _mlp_shapes(obs_dim, hidden, hidden, env.num_actions + 1)

    def fn(params, key):
        def net(p, state):
            out = _mlp(p, _flat(state.observation.astype(jnp.float32)), jax.nn.relu)
            logits = jnp.where(state.legal_action_mask, out[:, :-1], jnp.finfo(jnp.float32).min)
            return logits, jnp.tanh(out[:, -1])

        def recurrent_fn(p, rng_key, action, state):
            player = state.current_player
            state = jax.vmap(env.step)(state, action)
            logits, value = net(p, state)
            reward = state.rewards[jnp.arange(batch), player]
            value = jnp.where(state.terminated, 0.0, value)
            discount = jnp.where(state.terminated, 0.0, -1.0)
            return mctx.RecurrentFnOutput(
                reward=reward, discount=discount, prior_logits=logits, value=value
            ), state

        def move(state, key):
            k_search, k_act = jax.random.split(key)
            logits, value = net(params, state)
            root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=state)
            out = mctx.gumbel_muzero_policy(
                params,
                k_search,
                root,
                recurrent_fn,
                num_simulations=num_simulations,
                invalid_actions=~state.legal_action_mask,
                qtransform=mctx.qtransform_completed_by_mix_value,
                gumbel_scale=1.0,
            )
            state = jax.vmap(env.step)(state, out.action)
            return state, (out.action_weights, state.rewards)

        k_init, k_play = jax.random.split(key)
        state = jax.vmap(env.init)(jax.random.split(k_init, batch))
        state, (policy_targets, rewards) = jax.lax.scan(move, state, jax.random.split(k_play, moves))
        return policy_targets, rewards.sum(0)

    return fn, (shapes, KEY)


# ----------------------------------------------------------------------------------------------
# graph and simulation argument helpers
# ----------------------------------------------------------------------------------------------


def _abstract(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def _graph_args(nodes, edges, feat, graphs=1, edge_feat=None):
    import jraph

    return jraph.GraphsTuple(
        nodes=f32(nodes, feat),
        edges=None if edge_feat is None else f32(edges, edge_feat),
        senders=i32(edges),
        receivers=i32(edges),
        n_node=i32(graphs),
        n_edge=i32(graphs),
        globals=f32(graphs, 1),
    )


# ----------------------------------------------------------------------------------------------
# jraph
# ----------------------------------------------------------------------------------------------


def _optax_step(loss_fn, opt):
    """A train step `(params, opt_state, *batch) -> (params, opt_state, loss)`: the gradient
    of `loss_fn(params, *batch)` applied by the optax optimizer `opt`."""
    import optax

    def step(params, opt_state, *batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def _node_classifier_step(net, init, opt, nodes: int, feat: int):
    """A masked node-classification train step of `net` (params, graph -> logits) with the
    optax optimizer `opt`, on a graph of `nodes` nodes and 8 edges per node."""
    import optax

    def loss_fn(params, graph, labels, mask):
        logits = net(params, graph)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return jnp.sum(ce * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    params = jax.eval_shape(init, jax.random.PRNGKey(0))
    opt_state = jax.eval_shape(opt.init, params)
    return _optax_step(loss_fn, opt), (
        params, opt_state, _graph_args(nodes, nodes * 8, feat), i32(nodes), f32(nodes))


def jraph_gcn_step(layers: int, nodes: int, hidden: int = 64, feat: int = 32, classes: int = 8):
    """Semi-supervised GCN node-classification train step (jraph.GraphConvolution + optax adam)."""
    import jraph
    import optax

    opt = optax.adam(1e-2)

    def init(key):
        sizes = [feat] + [hidden] * (layers - 1) + [classes]
        return _mlp_init(key, sizes)

    def net(params, graph):
        for i, layer in enumerate(params):
            gcn = jraph.GraphConvolution(
                update_node_fn=lambda h, layer=layer: h @ layer["w"] + layer["b"],
                add_self_edges=True,
                symmetric_normalization=True,
            )
            graph = gcn(graph)
            if i < len(params) - 1:
                graph = graph._replace(nodes=jax.nn.relu(graph.nodes))
        return graph.nodes

    return _node_classifier_step(net, init, opt, nodes, feat)


def jraph_gcn_forward(nodes: int, feat: int = 64, classes: int = 8):
    """Inference of a one-layer GCN (jraph.GraphConvolution) with softmax class probabilities."""
    import jraph

    def run(params, graph):
        gcn = jraph.GraphConvolution(
            update_node_fn=lambda h: h @ params["w"] + params["b"], add_self_edges=True
        )
        return jax.nn.softmax(gcn(graph).nodes, axis=-1)

    params = {"w": f32(feat, classes), "b": f32(classes)}
    return run, (params, _graph_args(nodes, nodes * 8, feat))


def jraph_gat_step(
    layers: int, nodes: int, hidden: int = 32, heads: int = 4, feat: int = 32, classes: int = 8
):
    """Multi-head graph attention (jraph.GAT) node-classification train step with optax adamw."""
    import jraph
    import optax

    opt = optax.adamw(3e-3, weight_decay=5e-4)

    def init(key):
        params = []
        din = feat
        for i in range(layers):
            dout = classes if i == layers - 1 else hidden
            key, k1, k2, k3 = jax.random.split(key, 4)
            params.append(
                {
                    "w": jax.random.normal(k1, (din, heads, dout)) / np.sqrt(din),
                    "a_src": jax.random.normal(k2, (heads, dout)) * 0.1,
                    "a_dst": jax.random.normal(k3, (heads, dout)) * 0.1,
                }
            )
            din = dout * heads
        return params

    def net(params, graph):
        for i, p in enumerate(params):
            last = i == len(params) - 1

            def query(h, p=p):
                return jnp.einsum("nd,dhk->nhk", h, p["w"])

            def logit(sent, received, edges, p=p):
                e = jnp.sum(sent * p["a_src"], -1) + jnp.sum(received * p["a_dst"], -1)
                return jax.nn.leaky_relu(e, 0.2)[..., None]

            def update(h, last=last):
                return jnp.mean(h, axis=1) if last else jax.nn.elu(h.reshape(h.shape[0], -1))

            graph = jraph.GAT(query, logit, update)(graph)
        return graph.nodes

    return _node_classifier_step(net, init, opt, nodes, feat)


def jraph_mpnn_step(layers: int, graphs: int = 16, nodes_per_graph: int = 24, hidden: int = 64):
    """Batched-molecule GraphNetwork (edge/node/global MLP blocks) regression train step, adam."""
    import jraph
    import optax

    nodes = graphs * nodes_per_graph
    edges = nodes * 6
    feat, edge_feat = 16, 4
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))

    def init(key):
        keys = jax.random.split(key, 3 * layers + 3)
        blocks = []
        for i in range(layers):
            blocks.append(
                {
                    "edge": _mlp_init(keys[3 * i], [4 * hidden, hidden, hidden]),
                    "node": _mlp_init(keys[3 * i + 1], [3 * hidden, hidden, hidden]),
                    "glob": _mlp_init(keys[3 * i + 2], [3 * hidden, hidden, hidden]),
                }
            )
        return {
            "embed_n": _mlp_init(keys[-3], [feat, hidden]),
            "embed_e": _mlp_init(keys[-2], [edge_feat, hidden]),
            "blocks": blocks,
            "readout": _mlp_init(keys[-1], [hidden, hidden, 1]),
        }

    def net(params, graph):
        embed = jraph.GraphMapFeatures(
            embed_edge_fn=lambda e: _mlp(params["embed_e"], e, jax.nn.relu),
            embed_node_fn=lambda n: _mlp(params["embed_n"], n, jax.nn.relu),
            embed_global_fn=lambda g: jnp.zeros((g.shape[0], hidden)),
        )
        graph = embed(graph)
        for blk in params["blocks"]:

            def edge_fn(e, s, r, g, blk=blk):
                return _mlp(blk["edge"], jnp.concatenate([e, s, r, g], -1), jax.nn.silu)

            def node_fn(n, sent, recv, g, blk=blk):
                return _mlp(blk["node"], jnp.concatenate([n, recv, g], -1), jax.nn.silu)

            def glob_fn(n, e, g, blk=blk):
                return _mlp(blk["glob"], jnp.concatenate([n, e, g], -1), jax.nn.silu)

            new = jraph.GraphNetwork(edge_fn, node_fn, glob_fn)(graph)
            graph = new._replace(
                nodes=new.nodes + graph.nodes,
                edges=new.edges + graph.edges,
                globals=new.globals + graph.globals,
            )
        return _mlp(params["readout"], graph.globals, jax.nn.relu)[:, 0]

    def loss_fn(params, graph, targets, graph_mask):
        pred = net(params, graph)
        return jnp.sum(graph_mask * (pred - targets) ** 2) / jnp.sum(graph_mask)

    params = jax.eval_shape(init, jax.random.PRNGKey(0))
    opt_state = jax.eval_shape(opt.init, params)
    graph = _graph_args(nodes, edges, feat, graphs=graphs, edge_feat=edge_feat)
    return _optax_step(loss_fn, opt), (params, opt_state, graph, f32(graphs), f32(graphs))


# ----------------------------------------------------------------------------------------------
# jax-md
# ----------------------------------------------------------------------------------------------


def jaxmd_lj_nve(particles: int, steps: int = 1000):
    """Lennard-Jones NVE molecular dynamics in a periodic box, steps in lax.fori_loop."""
    from jax_md import energy, quantity, simulate, space

    box = float((particles / 0.8) ** 0.5)
    displacement, shift = space.periodic(box)
    energy_fn = energy.lennard_jones_pair(displacement, sigma=1.0, epsilon=1.0, r_cutoff=2.5)
    init_fn, apply_fn = simulate.nve(energy_fn, shift, dt=5e-3)

    def run(key, positions):
        state = init_fn(key, positions, kT=1.0)
        state = jax.lax.fori_loop(0, steps, lambda i, s: apply_fn(s), state)
        e_kin = quantity.kinetic_energy(momentum=state.momentum, mass=state.mass)
        return state.position, energy_fn(state.position) + e_kin

    return run, (jax.ShapeDtypeStruct((2,), jnp.uint32), f32(particles, 2))


def jaxmd_lj_forces(particles: int):
    """Lennard-Jones energy, forces and pressure-like virial of a periodic 3D configuration."""
    from jax_md import energy, quantity, space

    box = float((particles / 0.8) ** (1 / 3))
    displacement, _ = space.periodic(box)
    energy_fn = energy.lennard_jones_pair(displacement, sigma=1.0, epsilon=1.0, r_cutoff=2.5)
    force_fn = quantity.force(energy_fn)

    def run(positions):
        forces = force_fn(positions)
        return energy_fn(positions), forces, jnp.sum(forces * positions) / (3 * box**3)

    return run, (f32(particles, 3),)


def jaxmd_fire_neighbor(particles: int, steps: int = 500):
    """Bidisperse soft-sphere FIRE energy minimisation with a cell neighbour list (jit'd update)."""
    from jax_md import energy, minimize, space

    box = float((particles / 1.1) ** 0.5)
    displacement, shift = space.periodic(box)
    sigma = jnp.array([[1.0, 1.2], [1.2, 1.4]])
    species = jnp.arange(particles) % 2
    neighbor_fn, energy_fn = energy.soft_sphere_neighbor_list(
        displacement, box, species=species, sigma=sigma, fractional_coordinates=False
    )
    init_fn, apply_fn = minimize.fire_descent(energy_fn, shift, dt_start=0.01, dt_max=0.05)
    positions0 = np.random.default_rng(0).uniform(0, box, (particles, 2)).astype(np.float32)
    nbrs0 = neighbor_fn.allocate(positions0)
    # jax-md keeps the cell size, static metadata, as an array: JAX's trace caches cannot
    # compare it, so a second trace in one process (the measurement's) fails without this
    nbrs0 = nbrs0.set(cell_size=float(nbrs0.cell_size))

    def run(positions, nbrs):
        state = init_fn(positions, neighbor=nbrs)

        def body(i, carry):
            state, nbrs = carry
            nbrs = nbrs.update(state.position)
            return apply_fn(state, neighbor=nbrs), nbrs

        state, nbrs = jax.lax.fori_loop(0, steps, body, (state, nbrs))
        return state.position, energy_fn(state.position, neighbor=nbrs), nbrs.did_buffer_overflow

    return run, (f32(particles, 2), _abstract(nbrs0))


def jaxmd_unrolled_grad(particles: int, steps: int):
    """Gradient of a target-energy loss w.r.t. LJ sigma through a Python-unrolled NVE trajectory."""
    from jax_md import energy, simulate, space

    box = float((particles / 0.8) ** 0.5)
    displacement, shift = space.periodic(box)

    def loss(sigma, positions, momenta):
        energy_fn = energy.lennard_jones_pair(displacement, sigma=sigma, epsilon=1.0, r_cutoff=2.5)
        init_fn, apply_fn = simulate.nve(energy_fn, shift, dt=5e-3)
        state = init_fn(jax.random.PRNGKey(0), positions, kT=0.0, momenta=momenta)
        for _ in range(steps):
            state = apply_fn(state)
        return (energy_fn(state.position) / particles + 2.0) ** 2

    def run(sigma, positions, momenta):
        return jax.value_and_grad(loss)(sigma, positions, momenta)

    return run, (f32(), f32(particles, 2), f32(particles, 2))


# ----------------------------------------------------------------------------------------------
# ott-jax
# ----------------------------------------------------------------------------------------------


def ott_sinkhorn_cost(n: int, dim: int = 3):
    """Regularised OT cost between uniform point clouds via ott.solvers.linear.solve."""
    from ott.geometry import pointcloud
    from ott.solvers import linear

    def run(x, y):
        return linear.solve(pointcloud.PointCloud(x, y, epsilon=0.1)).reg_ot_cost

    return run, (f32(n, dim), f32(n, dim))


def ott_divergence_flow(n: int, steps: int, dim: int = 2):
    """Wasserstein gradient flow: Python-unrolled steps on the Sinkhorn divergence gradient."""
    from ott.geometry import pointcloud
    from ott.tools import sinkhorn_divergence

    def div(x, y):
        value, _ = sinkhorn_divergence.sinkhorn_divergence(
            pointcloud.PointCloud, x, y, epsilon=0.01, solve_kwargs={"max_iterations": 500, "threshold": 1e-3}
        )
        return value

    def run(x, y):
        losses = []
        for _ in range(steps):
            loss, g = jax.value_and_grad(div)(x, y)
            x = x - 0.5 * x.shape[0] * g
            losses.append(loss)
        return x, jnp.stack(losses)

    return run, (f32(n, dim), f32(n, dim))


def ott_gromov(n: int, m: int, outer: int = 20):
    """Entropic Gromov-Wasserstein between point clouds in different spaces (ott GW solver)."""
    from ott.geometry import pointcloud
    from ott.problems.quadratic import quadratic_problem
    from ott.solvers.linear import sinkhorn
    from ott.solvers.quadratic import gromov_wasserstein

    solver = gromov_wasserstein.GromovWasserstein(
        linear_solver=sinkhorn.Sinkhorn(max_iterations=500),
        epsilon=5e-3,
        max_iterations=outer,
        min_iterations=outer,
    )

    def run(x, y):
        x = (x - x.mean(0)) / x.std()
        y = (y - y.mean(0)) / y.std()
        geom_xx = pointcloud.PointCloud(x, x)
        geom_yy = pointcloud.PointCloud(y, y)
        out = solver(quadratic_problem.QuadraticProblem(geom_xx, geom_yy))
        return out.reg_gw_cost, out.matrix

    return run, (f32(n, 3), f32(m, 2))


# ----------------------------------------------------------------------------------------------
# jaxopt
# ----------------------------------------------------------------------------------------------


def jaxopt_lbfgs_logreg(samples: int, features: int, classes: int = 10):
    """Multiclass L2-regularised logistic regression solved with jaxopt.LBFGS (zoom line search)."""
    import jaxopt

    def objective(w, x, y, lam):
        logits = x @ w["W"] + w["b"]
        ll = jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, y[:, None], 1)[:, 0])
        return ll + 0.5 * lam * jnp.sum(w["W"] ** 2)

    solver = jaxopt.LBFGS(fun=objective, maxiter=200, tol=1e-4)

    def run(w0, x, y):
        sol, state = solver.run(w0, x, y, 1e-3)
        return sol, state.value, state.iter_num

    w0 = {"W": f32(features, classes), "b": f32(classes)}
    return run, (w0, f32(samples, features), i32(samples))


def jaxopt_implicit_hyper(features: int, hyper_steps: int):
    """Hyperparameter tuning of per-feature ridge penalties by implicit differentiation (jaxopt)."""
    import jaxopt
    import optax

    def inner_obj(w, log_lam, x, y):
        return 0.5 * jnp.mean((x @ w - y) ** 2) + 0.5 * jnp.sum(jnp.exp(log_lam) * w**2)

    inner = jaxopt.GradientDescent(
        fun=inner_obj, maxiter=300, tol=1e-5, implicit_diff=True, acceleration=True
    )
    opt = optax.adam(5e-2)

    def outer_loss(log_lam, xtr, ytr, xval, yval):
        w = inner.run(jnp.zeros(xtr.shape[1]), log_lam, xtr, ytr).params
        return jnp.mean((xval @ w - yval) ** 2)

    def run(log_lam, xtr, ytr, xval, yval):
        opt_state = opt.init(log_lam)
        losses = []
        for _ in range(hyper_steps):
            loss, g = jax.value_and_grad(outer_loss)(log_lam, xtr, ytr, xval, yval)
            updates, opt_state = opt.update(g, opt_state)
            log_lam = optax.apply_updates(log_lam, updates)
            losses.append(loss)
        return log_lam, jnp.stack(losses)

    n = 4 * features
    return run, (f32(features), f32(n, features), f32(n), f32(n, features), f32(n))


def jaxopt_nnls(rows: int, cols: int):
    """Non-negative least squares with jaxopt.ProjectedGradient onto the non-negative orthant."""
    import jaxopt
    from jaxopt.projection import projection_non_negative

    def objective(w, a, b):
        return 0.5 * jnp.sum((a @ w - b) ** 2)

    solver = jaxopt.ProjectedGradient(fun=objective, projection=projection_non_negative, maxiter=500)

    def run(w0, a, b):
        return solver.run(w0, a=a, b=b).params

    return run, (f32(cols), f32(rows, cols), f32(rows))


def jaxopt_lbfgs_mlp(depth: int, width: int = 64, samples: int = 512):
    """Full-batch training of a plain-jnp tanh MLP regressor with jaxopt.LBFGS."""
    import jaxopt

    def objective(params, x, y):
        pred = _mlp(params, x, jnp.tanh)[:, 0]
        return jnp.mean((pred - y) ** 2)

    solver = jaxopt.LBFGS(fun=objective, maxiter=500, history_size=20, linesearch="zoom")

    def run(params, x, y):
        sol, state = solver.run(params, x, y)
        return sol, state.value

    params = jax.eval_shape(lambda k: _mlp_init(k, [8] + [width] * depth + [1]), jax.random.PRNGKey(0))
    return run, (params, f32(samples, 8), f32(samples))


# ----------------------------------------------------------------------------------------------
# dm-pix
# ----------------------------------------------------------------------------------------------


def _augment(key, image, crop):
    import dm_pix as pix

    keys = jax.random.split(key, 7)
    image = pix.random_flip_left_right(keys[0], image)
    image = pix.random_crop(keys[1], image, (crop, crop, image.shape[-1]))
    image = pix.random_brightness(keys[2], image, 0.2)
    image = pix.random_contrast(keys[3], image, 0.8, 1.2)
    image = pix.random_saturation(keys[4], image, 0.8, 1.2)
    image = pix.random_hue(keys[5], image, 0.05)
    angle = jax.random.uniform(keys[6], (), minval=-0.3, maxval=0.3)
    image = pix.rotate(image, angle, mode="nearest")
    return jnp.clip(image, 0.0, 1.0)


def pix_ssim_psnr(batch: int, size: int):
    """Image-quality metrics of reconstructions with dm-pix: SSIM, PSNR and MAE per image."""
    import dm_pix as pix

    def run(targets, recons):
        return pix.ssim(targets, recons), pix.psnr(targets, recons), pix.mae(targets, recons)

    return run, (f32(batch, size, size, 3), f32(batch, size, size, 3))


def _conv_init(key, channels, classes):
    params = []
    for cin, cout in zip(channels[:-1], channels[1:], strict=True):
        key, sub = jax.random.split(key)
        params.append(
            {"w": jax.random.normal(sub, (3, 3, cin, cout)) / np.sqrt(9 * cin), "b": jnp.zeros(cout)}
        )
    key, sub = jax.random.split(key)
    params.append({"w": jax.random.normal(sub, (channels[-1], classes)) * 0.01, "b": jnp.zeros(classes)})
    return params


def _conv_apply(params, x):
    for i, p in enumerate(params[:-1]):
        x = (
            jax.lax.conv_general_dilated(
                x, p["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
            + p["b"]
        )
        x = jax.nn.relu(x)
        if i % 2 == 1:
            x = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
    x = jnp.mean(x, axis=(1, 2))
    return x @ params[-1]["w"] + params[-1]["b"]


def pix_cnn_step(batch: int, size: int, convs: int):
    """CNN classifier train step on dm-pix augmented images (vmapped pipeline), optax sgd momentum."""
    import optax

    crop = size * 7 // 8
    opt = optax.sgd(0.05, momentum=0.9)
    channels = [3] + [32 * (1 + i // 2) for i in range(convs)]

    def loss_fn(params, images, labels):
        logits = _conv_apply(params, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    def step(params, opt_state, key, images, labels):
        keys = jax.random.split(key, images.shape[0])
        aug = jax.vmap(lambda k, im: _augment(k, im, crop))(keys, images)
        loss, grads = jax.value_and_grad(loss_fn)(params, aug, labels)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params = jax.eval_shape(lambda k: _conv_init(k, channels, 10), jax.random.PRNGKey(0))
    opt_state = jax.eval_shape(opt.init, params)
    return step, (
        params,
        opt_state,
        jax.ShapeDtypeStruct((2,), jnp.uint32),
        f32(batch, size, size, 3),
        i32(batch),
    )


def pix_simclr_step(views: int, batch: int = 32, size: int = 32, convs: int = 4):
    """SimCLR-style multi-view contrastive train step: dm-pix views (one pipeline per view), NT-Xent."""
    import dm_pix as pix
    import optax

    crop = size * 3 // 4
    opt = optax.lars(0.3)
    channels = [3] + [32 * (1 + i // 2) for i in range(convs)]

    def view_fn(key, image):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        image = _augment(k1, image, crop)
        sigma = jax.random.uniform(k2, (), minval=0.1, maxval=2.0)
        image = pix.gaussian_blur(image, sigma, kernel_size=5)
        image = jnp.where(jax.random.uniform(k3) < 0.2, pix.solarize(image, 0.5), image)
        return jnp.where(
            jax.random.uniform(k4) < 0.2, jnp.repeat(pix.rgb_to_grayscale(image), 3, axis=-1), image
        )

    def loss_fn(params, images, key):
        embs = []
        for v in range(views):
            keys = jax.random.split(jax.random.fold_in(key, v), images.shape[0])
            x = jax.vmap(view_fn)(keys, images)
            z = _conv_apply(params, x)
            embs.append(z / jnp.linalg.norm(z, axis=-1, keepdims=True))
        loss = 0.0
        for i in range(views):
            for j in range(views):
                if i != j:
                    logits = embs[i] @ embs[j].T / 0.1
                    loss += optax.softmax_cross_entropy_with_integer_labels(
                        logits, jnp.arange(images.shape[0])
                    ).mean()
        return loss / (views * (views - 1))

    def step(params, opt_state, key, images):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, key)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params = jax.eval_shape(lambda k: _conv_init(k, channels, 128), jax.random.PRNGKey(0))
    opt_state = jax.eval_shape(opt.init, params)
    return step, (params, opt_state, jax.ShapeDtypeStruct((2,), jnp.uint32), f32(batch, size, size, 3))


# (builder, sizes) of each program measured
PROGRAMS = (
    (evosax_snes_regression, dict(generations=20, popsize=32)),
    (evosax_cma_es_cartpole, dict(generations=10, popsize=32, steps=200)),
    (evosax_open_es_minatar, dict(generations=5, popsize=64, steps=500, rollouts=2)),
    (pgx_vmapped_step, dict(game="tic_tac_toe", batch=64)),
    (pgx_policy_rollout, dict(game="connect_four", batch=128, max_steps=42, hidden=128)),
    (pgx_random_rollout, dict(game="go_9x9", batch=32, steps=100)),
    (pgx_random_rollout, dict(game="chess", batch=16, steps=50)),
    (rlax_batched_returns, dict(steps=64, batch=32)),
    (rlax_impala_vtrace_loss, dict(steps=20, batch=32, obs_dim=64, num_actions=6, hidden=128)),
    (gymnax_ppo_update,
     dict(env_name="CartPole-v1", num_envs=16, rollout=128, hidden=64, epochs=4, minibatches=4)),
    (gymnax_ppo_update,
     dict(env_name="Breakout-MinAtar", num_envs=32, rollout=128, hidden=256, epochs=5, minibatches=4,
          unroll=True)),
    (distrax_policy_kl_entropy, dict(batch=256, num_actions=18)),
    (distrax_gaussian_reinforce_grad, dict(batch=256, act_dim=6)),
    (distrax_tanh_gaussian_actor_loss, dict(batch=256, obs_dim=17, act_dim=6, hidden=256)),
    (distrax_spline_flow_train_step, dict(dim=8, layers=4, hidden=64, bins=8, batch=256)),
    (distrax_spline_flow_train_step, dict(dim=16, layers=10, hidden=128, bins=8, batch=256)),
    (distrax_spline_flow_train_step, dict(dim=16, layers=20, hidden=128, bins=8, batch=256)),
    (mctx_muzero_search, dict(batch=16, num_actions=8, latent=64, num_simulations=32)),
    (mctx_gumbel_alphazero_pgx, dict(game="connect_four", batch=16, hidden=128, num_simulations=32, moves=4)),
    (mctx_gumbel_alphazero_pgx, dict(game="chess", batch=8, hidden=256, num_simulations=16, moves=2)),
    (jraph_gcn_forward, dict(nodes=1024)),
    (jraph_gcn_step, dict(layers=2, nodes=256)),
    (jraph_gat_step, dict(layers=3, nodes=512)),
    (jraph_mpnn_step, dict(layers=4)),
    (jraph_mpnn_step, dict(layers=24)),
    (jaxmd_lj_forces, dict(particles=512)),
    (jaxmd_lj_nve, dict(particles=256)),
    (jaxmd_fire_neighbor, dict(particles=500)),
    (jaxmd_unrolled_grad, dict(particles=64, steps=40)),
    (jaxmd_unrolled_grad, dict(particles=64, steps=120)),
    (ott_sinkhorn_cost, dict(n=64)),
    (ott_divergence_flow, dict(n=256, steps=4)),
    (ott_gromov, dict(n=128, m=96)),
    (jaxopt_nnls, dict(rows=256, cols=64)),
    (jaxopt_lbfgs_logreg, dict(samples=1024, features=64)),
    (jaxopt_implicit_hyper, dict(features=32, hyper_steps=5)),
    (jaxopt_lbfgs_mlp, dict(depth=20)),
    (pix_ssim_psnr, dict(batch=8, size=128)),
    (pix_cnn_step, dict(batch=32, size=32, convs=4)),
    (pix_simclr_step, dict(views=8)),
)
# the library each builder's name starts with
LIBRARIES = {"evosax": "evosax", "pgx": "pgx", "rlax": "rlax", "gymnax": "gymnax",
             "distrax": "distrax", "mctx": "mctx", "jraph": "jraph", "jaxmd": "jax-md",
             "ott": "ott-jax", "jaxopt": "jaxopt", "pix": "dm-pix"}

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES))
