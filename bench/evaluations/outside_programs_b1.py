"""More programs for the outside-library evaluation: built with public JAX simulators and RL
libraries that no corpus family, other bench or training row uses, as their users write them.
Each builder returns a new function and abstract arguments (parameters, optimizer, simulator
and environment states, physics models and keys are arguments, not captured constants);
`OUTSIDE_FAMILIES` registers one family per builder, its grid the sizes measured.

- brax: a vmapped environment step with the simulated system as an argument (domain
  randomisation style), random-action rollouts, a PPO update built from brax's networks,
  acting and loss helpers, an analytic policy gradient through a differentiable rollout.
- mujoco-mjx: a batched multi-substep step of a generated pendulum chain, a shooting
  trajectory optimisation (gradient through an mjx rollout, Adam on the controls).
- craftax: random rollouts of Craftax-Classic and full Craftax (symbolic), a vmapped
  pixel-observation step, an actor-critic rollout and policy-gradient update on Craftax.
- xminigrid: a vmapped MiniGrid step, a recurrent-policy rollout on XLand-MiniGrid, a PPO
  update with a GRU policy on a MiniGrid task.
- jumanji: random rollouts of Game2048, Minesweeper and RubiksCube, A2C on Snake with a CNN
  policy, REINFORCE on TSP with an attention policy, a multi-agent RobotWarehouse rollout.
- flashbax: a double-DQN step (add, sample, TD loss) on a flat buffer, a prioritised n-step
  sequence learner that updates priorities, frame-stacked behaviour cloning from a trajectory
  buffer, a SAC step on brax that writes its fresh transitions to an item buffer.

Policy, value and Q networks are plain jax.numpy MLPs unless the library ships its own;
optax supplies optimizers.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.training.corpus.registry import libraries_by_prefix, register_builders, sds

KEY = sds((2,), np.uint32)


def _abstract(tree):
    """The ShapeDtypeStruct pytree of concrete `tree` (a simulator model, a library state)."""
    return jax.tree.map(lambda x: sds(jnp.shape(x), jnp.result_type(x)), tree)


def _mlp_init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [{"w": jax.random.normal(k, (a, b)) / np.sqrt(a), "b": jnp.zeros(b)}
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def _mlp(params, x, act=jax.nn.relu):
    for layer in params[:-1]:
        x = act(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def _shapes(init, *args):
    """Abstract parameters from `init(PRNGKey(0), *args)`, without materialising them."""
    return jax.eval_shape(lambda: init(jax.random.PRNGKey(0), *args))


def _train_state(opt, params):
    """Abstract (params, optimizer state) of an optax optimizer over abstract `params`."""
    return params, jax.eval_shape(opt.init, params)


def _apply_grads(opt, loss_fn, params, opt_state, *inputs, has_aux=False):
    """One optax step on `loss_fn(params, *inputs)`; returns (params, opt_state, loss or (loss, aux))."""
    import optax

    out, grads = jax.value_and_grad(loss_fn, has_aux=has_aux)(params, *inputs)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, out


def _discounted_returns(rewards, dones, last_value, gamma=0.99):
    """Bootstrapped discounted returns of a time-major [T, ...] rollout (reverse scan)."""
    def back(ret, x):
        reward, done = x
        ret = reward + gamma * ret * (1.0 - done)
        return ret, ret

    _, returns = jax.lax.scan(back, last_value, (rewards, dones.astype(jnp.float32)), reverse=True)
    return returns


def _gae(rewards, values, dones, last_value, gamma=0.99, lam=0.95):
    """Generalised advantage estimates of a time-major rollout; returns (advantages, targets)."""
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    not_done = 1.0 - dones.astype(jnp.float32)
    deltas = rewards + gamma * next_values * not_done - values

    def back(adv, x):
        delta, nd = x
        adv = delta + gamma * lam * nd * adv
        return adv, adv

    _, adv = jax.lax.scan(back, jnp.zeros_like(last_value), (deltas, not_done), reverse=True)
    return adv, adv + values


def _ppo_loss(logits, values, actions, old_logp, advantages, targets, clip=0.2):
    """Clipped-surrogate PPO loss of a categorical policy (+ value loss, - entropy bonus)."""
    logp_all = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, actions[..., None], axis=-1)[..., 0]
    ratio = jnp.exp(logp - old_logp)
    adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv)
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    return -surrogate.mean() + 0.5 * jnp.mean((values - targets) ** 2) - 0.01 * entropy.mean()


# ------------------------------------------------------------------------------------------- brax


def _brax_env(name: str, backend: str):
    from brax import envs

    return envs.get_environment(name, backend=backend)


@contextlib.contextmanager
def _with_sys(env, sys):
    """`env` stepping the (traced) system `sys`, as brax's domain-randomisation wrapper does."""
    base = env.unwrapped
    old, base.sys = base.sys, sys
    try:
        yield env
    finally:
        base.sys = old


def _brax_states(env, batch: int):
    return jax.eval_shape(lambda: jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), batch)))


def brax_vmapped_step(env_name: str, backend: str, batch: int):
    """One vmapped brax environment step; the physical system is an argument (domain randomisation)."""
    env = _brax_env(env_name, backend)

    def step(sys, states, actions):
        with _with_sys(env, sys):
            return jax.vmap(env.step)(states, actions)

    return step, (_abstract(env.sys), _brax_states(env, batch), sds((batch, env.action_size)))


def brax_random_rollout(env_name: str, backend: str, batch: int, steps: int):
    """Reset a batch of brax environments and roll uniform random actions in lax.scan; mean return."""
    env = _brax_env(env_name, backend)

    def rollout(sys, key):
        with _with_sys(env, sys):
            k_reset, k_act = jax.random.split(key)
            state = jax.vmap(env.reset)(jax.random.split(k_reset, batch))

            def step(state, key):
                action = jax.random.uniform(key, (batch, env.action_size), minval=-1.0, maxval=1.0)
                state = jax.vmap(env.step)(state, action)
                return state, state.reward

            state, rewards = jax.lax.scan(step, state, jax.random.split(k_act, steps))
        return rewards.sum(0).mean(), state.pipeline_state

    return rollout, (_abstract(env.sys), KEY)


def brax_ppo_update(env_name: str, backend: str, num_envs: int, unroll: int, minibatches: int,
                    epochs: int = 2):
    """A brax PPO iteration: acting.generate_unroll, running-statistics update, clipped-loss Adam epochs."""
    import optax
    from brax import envs
    from brax.training import acting
    from brax.training.acme import running_statistics
    from brax.training.agents.ppo import losses as ppo_losses
    from brax.training.agents.ppo import networks as ppo_networks

    env = envs.training.wrap(_brax_env(env_name, backend), episode_length=1000)
    nets = ppo_networks.make_ppo_networks(env.observation_size, env.action_size,
                                          preprocess_observations_fn=running_statistics.normalize)
    make_policy = ppo_networks.make_inference_fn(nets)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(3e-4))

    def init_params(key):
        k_pi, k_v = jax.random.split(key)
        return ppo_losses.PPONetworkParams(policy=nets.policy_network.init(k_pi),
                                           value=nets.value_network.init(k_v))

    def loss_fn(params, normalizer, data, key):
        return ppo_losses.compute_ppo_loss(params, normalizer, data, key, nets, discounting=0.97)

    def iteration(sys, params, opt_state, normalizer, env_state, key):
        k_unroll, k_train = jax.random.split(key)
        with _with_sys(env, sys):
            policy = make_policy((normalizer, params.policy))
            env_state, data = acting.generate_unroll(env, env_state, policy, k_unroll, unroll,
                                                     extra_fields=("truncation",))
        data = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), data)  # [envs, T, ...]
        normalizer = running_statistics.update(normalizer, data.observation)

        def sgd_step(carry, minibatch):
            params, opt_state, key = carry
            key, k_loss = jax.random.split(key)
            params, opt_state, (loss, _) = _apply_grads(opt, loss_fn, params, opt_state, normalizer,
                                                       minibatch, k_loss, has_aux=True)
            return (params, opt_state, key), loss

        carry = (params, opt_state, k_train)
        for _ in range(epochs):  # each epoch reshuffles the environments into minibatches
            perm = jax.random.permutation(carry[2], num_envs)
            batches = jax.tree.map(lambda x: x[perm].reshape(minibatches, -1, *x.shape[1:]), data)
            carry, losses = jax.lax.scan(sgd_step, carry, batches)
        return carry[0], carry[1], normalizer, env_state, losses.mean()

    params, opt_state = _train_state(opt, _shapes(init_params))
    normalizer = jax.eval_shape(running_statistics.init_state, sds((env.observation_size,)))
    env_state = jax.eval_shape(lambda: env.reset(jax.random.split(jax.random.PRNGKey(0), num_envs)))
    return iteration, (_abstract(env.sys), params, opt_state, normalizer, env_state, KEY)


def brax_apg_step(env_name: str, backend: str, batch: int, horizon: int, hidden: int = 64):
    """Analytic policy gradient: Adam on an MLP policy through a differentiable brax rollout."""
    import optax

    env = _brax_env(env_name, backend)
    opt = optax.adam(1e-3)

    def neg_return(params, sys, key):
        with _with_sys(env, sys):
            state = jax.vmap(env.reset)(jax.random.split(key, batch))

            def step(state, _):
                action = jnp.tanh(_mlp(params, state.obs, jnp.tanh))
                state = jax.vmap(env.step)(state, action)
                return state, state.reward

            _, rewards = jax.lax.scan(step, state, None, length=horizon)
        return -rewards.sum(0).mean()

    def train_step(params, opt_state, sys, key):
        return _apply_grads(opt, neg_return, params, opt_state, sys, key)

    params, opt_state = _train_state(opt, _shapes(_mlp_init, (env.observation_size, hidden, hidden,
                                                              env.action_size)))
    return train_step, (params, opt_state, _abstract(env.sys), KEY)


# ------------------------------------------------------------------------------------- mujoco-mjx


def _chain_xml(links: int, iterations: int) -> str:
    """MJCF of a planar chain of `links` hinged capsules, one motor per joint, a floor for contacts;
    one constraint-solver iteration (no while_loop) makes the step reverse-differentiable."""
    body = ""
    for i in reversed(range(links)):
        body = (f'<body pos="0 0 -0.3"><joint name="j{i}" type="hinge" axis="0 1 0" damping="0.05"/>'
                f'<geom type="capsule" size="0.04" fromto="0 0 0 0 0 -0.3" mass="0.2"/>{body}</body>')
    motors = "".join(f'<motor joint="j{i}" gear="2" ctrlrange="-1 1"/>' for i in range(links))
    return (f'<mujoco><option timestep="0.005" iterations="{iterations}" ls_iterations="6"/><worldbody>'
            f'<geom type="plane" size="5 5 0.1" pos="0 0 {-0.3 * links - 0.5}"/>'
            f'<body pos="0 0 2">{body}</body></worldbody><actuator>{motors}</actuator></mujoco>')


def _mjx_chain(links: int, iterations: int = 20):
    """(mjx model, abstract model, abstract data) of a generated pendulum chain."""
    import mujoco
    from mujoco import mjx

    model = mjx.put_model(mujoco.MjModel.from_xml_string(_chain_xml(links, iterations)))
    return model, _abstract(model), jax.eval_shape(mjx.make_data, model)


def mjx_batched_step(links: int, batch: int, substeps: int):
    """A control step of a batch of mjx pendulum chains: `substeps` mjx.step calls per control (scan)."""
    from mujoco import mjx

    model, model_shape, data_shape = _mjx_chain(links)
    batched = jax.tree.map(lambda s: sds((batch, *s.shape), s.dtype), data_shape)

    def control_step(model, data, ctrl):
        def physics(data, _):
            return mjx.step(model, data), None

        def one(data, ctrl):
            return jax.lax.scan(physics, data.replace(ctrl=ctrl), None, length=substeps)[0]

        return jax.vmap(one)(data, ctrl)

    return control_step, (model_shape, batched, sds((batch, model.nu)))


def mjx_shooting_step(links: int, horizon: int):
    """Single-shooting trajectory optimisation: Adam on an mjx control sequence to swing a chain's tip up."""
    import optax
    from mujoco import mjx

    model, model_shape, data_shape = _mjx_chain(links, iterations=1)
    opt = optax.adam(0.05)

    def cost(ctrls, model, data):
        def step(data, ctrl):
            data = mjx.step(model, data.replace(ctrl=jnp.tanh(ctrl)))
            tip_height = data.geom_xpos[-1, 2]
            return data, -tip_height + 1e-3 * jnp.sum(ctrl ** 2)

        _, costs = jax.lax.scan(step, data, ctrls)
        return costs.sum()

    def solve_step(ctrls, opt_state, model, data):
        return _apply_grads(opt, cost, ctrls, opt_state, model, data)

    ctrls, opt_state = _train_state(opt, sds((horizon, model.nu)))
    return solve_step, (ctrls, opt_state, model_shape, data_shape)


# ----------------------------------------------------------------------------------------- craftax


def _craftax(env_name: str):
    """(auto-resetting craftax env, abstract default env params)."""
    from craftax.craftax_env import make_craftax_env_from_name

    env = make_craftax_env_from_name(env_name, auto_reset=True)
    return env, _abstract(env.default_params)


def _craftax_reset(env, params, key, batch):
    return jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, batch), params)


def _craftax_step(env, params, key, state, action):
    """A vmapped auto-resetting step: (obs, state, reward, done)."""
    keys = jax.random.split(key, action.shape[0])
    obs, state, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)
    return obs, state, reward, done


def craftax_random_rollout(env_name: str, batch: int, steps: int):
    """Reset a batch of Craftax worlds and play uniform random actions in lax.scan; total reward."""
    env, params_shape = _craftax(env_name)

    def rollout(params, key):
        k_reset, k_run = jax.random.split(key)
        _, state = _craftax_reset(env, params, k_reset, batch)

        def step(state, key):
            k_act, k_step = jax.random.split(key)
            action = jax.random.randint(k_act, (batch,), 0, env.num_actions)
            _, state, reward, done = _craftax_step(env, params, k_step, state, action)
            return state, (reward, done)

        state, (rewards, dones) = jax.lax.scan(step, state, jax.random.split(k_run, steps))
        return rewards.sum(), dones.sum(), state.player_position

    return rollout, (params_shape, KEY)


def craftax_pixels_step(env_name: str, batch: int):
    """One vmapped step of a pixel-observation Craftax env (world update + sprite rendering)."""
    env, params_shape = _craftax(env_name)
    _, state_shape = jax.eval_shape(lambda: _craftax_reset(env, env.default_params, jax.random.PRNGKey(0),
                                                          batch))

    def step(params, state, action, key):
        return _craftax_step(env, params, key, state, action)

    return step, (params_shape, state_shape, sds((batch,), np.int32), KEY)


def craftax_actor_critic_update(env_name: str, num_envs: int, steps: int, hidden: int = 256):
    """Actor-critic on symbolic Craftax: MLP policy rollout in lax.scan, GAE, one PPO Adam step."""
    import optax

    env, params_shape = _craftax(env_name)
    obs_dim = int(np.prod(env.observation_space(env.default_params).shape))
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(2e-4))
    _, state_shape = jax.eval_shape(lambda: _craftax_reset(env, env.default_params, jax.random.PRNGKey(0),
                                                          num_envs))

    def heads(net, obs):
        return _mlp(net["pi"], obs), _mlp(net["v"], obs)[..., 0]

    def loss_fn(net, traj, adv, targets):
        logits, values = heads(net, traj["obs"])
        return _ppo_loss(logits, values, traj["action"], traj["logp"], adv, targets)

    def update(net, opt_state, env_params, state, obs, key):
        def step(carry, key):
            state, obs = carry
            k_act, k_step = jax.random.split(key)
            logits, value = heads(net, obs)
            action = jax.random.categorical(k_act, logits)
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
            next_obs, state, reward, done = _craftax_step(env, env_params, k_step, state, action)
            out = dict(obs=obs, action=action, logp=logp, value=value, reward=reward, done=done)
            return (state, next_obs), out

        (state, obs), traj = jax.lax.scan(step, (state, obs), jax.random.split(key, steps))
        adv, targets = _gae(traj["reward"], traj["value"], traj["done"], heads(net, obs)[1])
        net, opt_state, loss = _apply_grads(opt, loss_fn, net, opt_state, traj, adv, targets)
        return net, opt_state, state, obs, loss

    net, opt_state = _train_state(opt, _shapes(lambda k: {
        "pi": _mlp_init(k, (obs_dim, hidden, hidden, env.num_actions)),
        "v": _mlp_init(jax.random.fold_in(k, 1), (obs_dim, hidden, hidden, 1))}))
    return update, (net, opt_state, params_shape, state_shape, sds((num_envs, obs_dim)), KEY)


# --------------------------------------------------------------------------------------- xminigrid


def _xminigrid(env_id: str):
    """(auto-resetting xminigrid env, abstract env params, observation width after one-hot)."""
    import xminigrid
    from xminigrid.core.constants import NUM_COLORS, NUM_TILES
    from xminigrid.wrappers import GymAutoResetWrapper

    env, env_params = xminigrid.make(env_id)
    env = GymAutoResetWrapper(env)
    view = env_params.view_size
    return env, _abstract(env_params), view * view * (NUM_TILES + NUM_COLORS)


def _grid_features(obs):
    """One-hot tile and colour channels of (batch, view, view, 2) grid observations, flattened."""
    from xminigrid.core.constants import NUM_COLORS, NUM_TILES

    feats = jnp.concatenate([jax.nn.one_hot(obs[..., 0], NUM_TILES), jax.nn.one_hot(obs[..., 1], NUM_COLORS)],
                            axis=-1)
    return feats.reshape(obs.shape[0], -1)


def _xminigrid_timesteps(env, env_id: str, batch: int):
    import xminigrid

    params = xminigrid.make(env_id)[1]
    return jax.eval_shape(lambda: jax.vmap(env.reset, in_axes=(None, 0))(
        params, jax.random.split(jax.random.PRNGKey(0), batch)))


def _gru_init(key, in_dim, hidden):
    k_x, k_h = jax.random.split(key)
    return {"wx": jax.random.normal(k_x, (in_dim, 3 * hidden)) / np.sqrt(in_dim),
            "wh": jax.random.normal(k_h, (hidden, 3 * hidden)) / np.sqrt(hidden), "b": jnp.zeros(3 * hidden)}


def _gru(params, h, x):
    """One GRU cell update of hidden state `h` on input `x`."""
    gx = x @ params["wx"] + params["b"]
    gh = h @ params["wh"]
    (rx, zx, nx), (rh, zh, nh) = jnp.split(gx, 3, -1), jnp.split(gh, 3, -1)
    r, z = jax.nn.sigmoid(rx + rh), jax.nn.sigmoid(zx + zh)
    return (1 - z) * jnp.tanh(nx + r * nh) + z * h


def _rnn_agent_init(key, obs_dim, hidden, num_actions):
    k_enc, k_gru, k_pi, k_v = jax.random.split(key, 4)
    return {"enc": _mlp_init(k_enc, (obs_dim, hidden)), "gru": _gru_init(k_gru, hidden, hidden),
            "pi": _mlp_init(k_pi, (hidden, hidden, num_actions)), "v": _mlp_init(k_v, (hidden, hidden, 1))}


def _rnn_agent(net, h, obs, done):
    """Recurrent actor-critic on grid observations; the memory is cleared where an episode ended."""
    x = jax.nn.relu(_mlp(net["enc"], _grid_features(obs)))
    h = _gru(net["gru"], jnp.where(done[:, None], 0.0, h), x)
    return h, _mlp(net["pi"], h), _mlp(net["v"], h)[..., 0]


def _xminigrid_rollout(env, env_params, net, carry, key, steps):
    """Recurrent-policy rollout of vmapped xminigrid envs in lax.scan; returns (carry, trajectory)."""
    def step(carry, key):
        timestep, h, prev_done = carry
        h_new, logits, value = _rnn_agent(net, h, timestep.observation, prev_done)
        action = jax.random.categorical(key, logits)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
        next_ts = jax.vmap(env.step, in_axes=(None, 0, 0))(env_params, timestep, action)
        done = next_ts.last()
        out = dict(obs=timestep.observation, prev_done=prev_done, action=action, logp=logp, value=value,
                   reward=next_ts.reward, done=done)
        return (next_ts, h_new, done), out

    return jax.lax.scan(step, carry, jax.random.split(key, steps))


def xminigrid_vmapped_step(env_id: str, batch: int):
    """One vmapped auto-resetting xminigrid step with the env params (grid, ruleset) as an argument."""
    env, params_shape, _ = _xminigrid(env_id)

    def step(env_params, timestep, action):
        return jax.vmap(env.step, in_axes=(None, 0, 0))(env_params, timestep, action)

    return step, (params_shape, _xminigrid_timesteps(env, env_id, batch), sds((batch,), np.int32))


def xminigrid_rnn_rollout(env_id: str, num_envs: int, steps: int, hidden: int = 128):
    """Meta-RL evaluation: a GRU policy rolled on XLand-MiniGrid with a ruleset-carrying params argument."""
    env, params_shape, obs_dim = _xminigrid(env_id)
    net = _shapes(_rnn_agent_init, obs_dim, hidden, 6)

    def evaluate(net, env_params, key):
        k_reset, k_run = jax.random.split(key)
        timestep = jax.vmap(env.reset, in_axes=(None, 0))(env_params, jax.random.split(k_reset, num_envs))
        carry = (timestep, jnp.zeros((num_envs, hidden)), jnp.zeros(num_envs, bool))
        _, traj = _xminigrid_rollout(env, env_params, net, carry, k_run, steps)
        return traj["reward"].sum(0).mean(), traj["done"].sum()

    return evaluate, (net, params_shape, KEY)


def xminigrid_ppo_update(env_id: str, num_envs: int, steps: int, epochs: int, hidden: int = 128):
    """Recurrent PPO iteration on xminigrid: GRU rollout, GAE, `epochs` Adam steps replaying the GRU."""
    import optax

    env, params_shape, obs_dim = _xminigrid(env_id)
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(3e-4))

    def loss_fn(net, traj, h0, adv, targets):
        def replay(h, x):
            h, logits, value = _rnn_agent(net, h, x["obs"], x["prev_done"])
            return h, (logits, value)

        _, (logits, values) = jax.lax.scan(replay, h0, traj)
        return _ppo_loss(logits, values, traj["action"], traj["logp"], adv, targets)

    def update(net, opt_state, env_params, timestep, h, prev_done, key):
        (timestep, h_last, done), traj = _xminigrid_rollout(env, env_params, net, (timestep, h, prev_done),
                                                            key, steps)
        _, _, last_value = _rnn_agent(net, h_last, timestep.observation, done)
        adv, targets = _gae(traj["reward"], traj["value"], traj["done"], last_value)
        losses = []
        for _ in range(epochs):
            net, opt_state, loss = _apply_grads(opt, loss_fn, net, opt_state, traj, h, adv, targets)
            losses.append(loss)
        return net, opt_state, timestep, h_last, done, jnp.stack(losses)

    net, opt_state = _train_state(opt, _shapes(_rnn_agent_init, obs_dim, hidden, 6))
    return update, (net, opt_state, params_shape, _xminigrid_timesteps(env, env_id, num_envs),
                    sds((num_envs, hidden)), sds((num_envs,), np.bool_), KEY)


# ----------------------------------------------------------------------------------------- jumanji


def _jumanji(env_id: str, **kwargs):
    """A vmapped, auto-resetting jumanji environment."""
    import jumanji
    from jumanji.wrappers import AutoResetWrapper, VmapWrapper

    return VmapWrapper(AutoResetWrapper(jumanji.make(env_id, **kwargs)))


def _jumanji_states(env, batch: int):
    return jax.eval_shape(lambda: env.reset(jax.random.split(jax.random.PRNGKey(0), batch)))


def _random_actions(key, spec, batch):
    """Uniform random actions of a jumanji discrete or multi-discrete action spec."""
    num_values = jnp.asarray(spec.num_values)
    return jax.random.randint(key, (batch, *num_values.shape), 0, num_values)


def jumanji_random_rollout(env_id: str, batch: int, steps: int):
    """Random-action rollouts of a vmapped auto-resetting jumanji env in lax.scan; summed rewards."""
    env = _jumanji(env_id)

    def rollout(state, key):
        def step(state, key):
            state, timestep = env.step(state, _random_actions(key, env.action_spec, batch))
            return state, timestep.reward

        state, rewards = jax.lax.scan(step, state, jax.random.split(key, steps))
        return state, rewards.sum(0)

    return rollout, (_jumanji_states(env, batch)[0], KEY)


def _conv_init(key, channels, in_hw, out):
    keys = jax.random.split(key, len(channels))
    convs = [jax.random.normal(k, (3, 3, a, b)) / np.sqrt(9 * a)
             for k, a, b in zip(keys[:-1], channels[:-1], channels[1:])]
    return {"convs": convs, "head": _mlp_init(keys[-1], (in_hw * channels[-1], 256, out))}


def _conv_net(params, x):
    for w in params["convs"]:
        x = jax.nn.relu(jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC")))
    return _mlp(params["head"], x.reshape(x.shape[0], -1))


def jumanji_snake_a2c(batch: int, steps: int, convs: int = 3):
    """A2C on jumanji Snake: CNN policy with action masking rolled in lax.scan, n-step returns, Adam."""
    import optax

    env = _jumanji("Snake-v1")
    grid = env.observation_spec.grid.shape
    opt = optax.rmsprop(7e-4)

    def heads(net, obs):
        out = _conv_net(net, obs.grid.astype(jnp.float32))
        return jnp.where(obs.action_mask, out[:, :4], -1e9), out[:, 4]

    def loss_fn(net, traj, returns):
        logits, values = heads(net, traj["obs"])
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), traj["action"][..., None], -1)[..., 0]
        adv = jax.lax.stop_gradient(returns - values)
        return -(logp * adv).mean() + 0.5 * ((returns - values) ** 2).mean()

    def update(net, opt_state, state, timestep, key):
        def step(carry, key):
            state, timestep = carry
            logits, _ = heads(net, timestep.observation)
            action = jax.random.categorical(key, logits)
            state, next_ts = env.step(state, action)
            out = dict(obs=timestep.observation, action=action, reward=next_ts.reward, done=next_ts.last())
            return (state, next_ts), out

        (state, timestep), traj = jax.lax.scan(step, (state, timestep), jax.random.split(key, steps))
        returns = _discounted_returns(traj["reward"], traj["done"], heads(net, timestep.observation)[1])
        flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), (traj, returns))
        net, opt_state, loss = _apply_grads(opt, loss_fn, net, opt_state, *flat)
        return net, opt_state, state, timestep, loss

    net, opt_state = _train_state(opt, _shapes(_conv_init, [grid[-1]] + [32] * convs, grid[0] * grid[1], 5))
    state, timestep = _jumanji_states(env, batch)
    return update, (net, opt_state, state, timestep, KEY)


def _attention(p, q, kv, heads):
    """Multi-head attention of queries `q` over `kv` (batch, n, d)."""
    def split(x):
        return x.reshape(*x.shape[:-1], heads, -1)

    qh, kh, vh = split(q @ p["q"]), split(kv @ p["k"]), split(kv @ p["v"])
    w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", qh, kh) / np.sqrt(qh.shape[-1]), -1)
    return jnp.einsum("bhqk,bkhd->bqhd", w, vh).reshape(q.shape) @ p["o"]


def _encoder_init(key, layers, dim):
    def layer(k):
        ks = jax.random.split(k, 5)
        return {**{n: jax.random.normal(kk, (dim, dim)) / np.sqrt(dim) for n, kk in zip("qkvo", ks)},
                "ff": _mlp_init(ks[4], (dim, 2 * dim, dim))}

    k_in, k_ctx, *ks = jax.random.split(key, layers + 2)
    return {"embed": _mlp_init(k_in, (2, dim)), "ctx": _mlp_init(k_ctx, (2 * dim, dim)),
            "layers": [layer(k) for k in ks]}


def _encode(p, coords, heads):
    """Transformer encoder (post-norm residual attention + feed-forward blocks) of city coordinates."""
    x = _mlp(p["embed"], coords)
    for layer in p["layers"]:
        x = jax.nn.standardize(x + _attention(layer, x, x, heads), axis=-1)
        x = jax.nn.standardize(x + _mlp(layer["ff"], x), axis=-1)
    return x


def jumanji_tsp_reinforce(num_cities: int, batch: int, layers: int, dim: int = 128, heads: int = 8):
    """REINFORCE on jumanji TSP: attention encoder, pointer decoder over an env rollout, mean baseline."""
    import optax
    from jumanji.environments.routing.tsp.generator import UniformGenerator

    env = _jumanji("TSP-v1", generator=UniformGenerator(num_cities=num_cities))
    opt = optax.adam(1e-4)

    def episode(net, state, timestep, key):
        emb = _encode(net, timestep.observation.coordinates, heads)

        def step(carry, key):
            state, timestep = carry
            obs = timestep.observation
            current = jnp.take_along_axis(emb, obs.position[:, None, None], 1)[:, 0]
            query = _mlp(net["ctx"], jnp.concatenate([current, emb.mean(1)], -1))[:, None]
            scores = jnp.einsum("bqd,bnd->bn", query, emb) / np.sqrt(dim)
            logits = jnp.where(obs.action_mask, 10.0 * jnp.tanh(scores), -1e9)
            action = jax.random.categorical(key, logits)
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
            state, timestep = env.step(state, action)
            return (state, timestep), (logp, timestep.reward)

        _, (logps, rewards) = jax.lax.scan(step, (state, timestep), jax.random.split(key, num_cities))
        return logps.sum(0), rewards.sum(0)

    def loss_fn(net, state, timestep, key):
        logp, tour_return = episode(net, state, timestep, key)
        adv = jax.lax.stop_gradient(tour_return - tour_return.mean())
        return -(adv * logp).mean(), tour_return.mean()

    def update(net, opt_state, key):
        k_reset, k_run = jax.random.split(key)
        state, timestep = env.reset(jax.random.split(k_reset, batch))
        return _apply_grads(opt, loss_fn, net, opt_state, state, timestep, k_run, has_aux=True)

    net, opt_state = _train_state(opt, _shapes(_encoder_init, layers, dim))
    return update, (net, opt_state, KEY)


def jumanji_warehouse_rollout(num_agents: int, batch: int, steps: int, hidden: int = 128):
    """Multi-agent RobotWarehouse rollout: one MLP policy shared by all agents, masked sampling, scan."""
    from jumanji.environments.routing.robot_warehouse.generator import RandomGenerator

    generator = RandomGenerator(shelf_rows=2, shelf_columns=3, column_height=8, num_agents=num_agents,
                                sensor_range=1, request_queue_size=num_agents * 2)
    env = _jumanji("RobotWarehouse-v0", generator=generator)
    obs_dim = env.observation_spec.agents_view.shape[-1]

    def rollout(policy, state, timestep, key):
        def step(carry, key):
            state, timestep = carry
            obs = timestep.observation
            logits = jnp.where(obs.action_mask, _mlp(policy, obs.agents_view), -1e9)
            state, timestep = env.step(state, jax.random.categorical(key, logits))
            return (state, timestep), timestep.reward

        (state, timestep), rewards = jax.lax.scan(step, (state, timestep), jax.random.split(key, steps))
        return state, timestep, rewards.sum(0)

    state, timestep = _jumanji_states(env, batch)
    return rollout, (_shapes(_mlp_init, (obs_dim, hidden, hidden, 5)), state, timestep, KEY)


# ---------------------------------------------------------------------------------------- flashbax


def _transition(obs_dim: int, act_shape=(), act_dtype=np.int32):
    """One (obs, action, reward, done) item, as flashbax buffers are initialised from."""
    return {"obs": jnp.zeros(obs_dim), "action": jnp.zeros(act_shape, act_dtype), "reward": jnp.zeros(()),
            "done": jnp.zeros((), bool)}


def _polyak(target, online, tau=0.005):
    return jax.tree.map(lambda t, o: (1 - tau) * t + tau * o, target, online)


def flashbax_dqn_step(obs_dim: int, num_actions: int, num_envs: int, batch: int, capacity: int,
                      hidden: int = 256):
    """A double-DQN learner step: add actors' transitions to a flashbax flat buffer, sample pairs, TD step."""
    import flashbax as fbx
    import optax

    buffer = fbx.make_flat_buffer(max_length=capacity, min_length=batch, sample_batch_size=batch,
                                  add_batch_size=num_envs)
    opt = optax.adam(1e-4)

    def td_loss(q_net, target_net, first, second):
        q = jnp.take_along_axis(_mlp(q_net, first["obs"]), first["action"][:, None], -1)[:, 0]
        next_q = _mlp(target_net, second["obs"])
        best = jnp.argmax(_mlp(q_net, second["obs"]), -1)  # double DQN action selection
        target = first["reward"] + 0.99 * (1.0 - first["done"]) * jnp.take_along_axis(
            next_q, best[:, None], -1)[:, 0]
        return optax.huber_loss(q, jax.lax.stop_gradient(target)).mean()

    def learner_step(q_net, target_net, opt_state, buffer_state, transitions, key):
        buffer_state = buffer.add(buffer_state, transitions)
        pair = buffer.sample(buffer_state, key).experience
        q_net, opt_state, loss = _apply_grads(opt, td_loss, q_net, opt_state, target_net, pair.first,
                                              pair.second)
        return q_net, _polyak(target_net, q_net), opt_state, buffer_state, loss

    q_net, opt_state = _train_state(opt, _shapes(_mlp_init, (obs_dim, hidden, hidden, num_actions)))
    buffer_state = jax.eval_shape(lambda: buffer.init(_transition(obs_dim)))
    transitions = jax.eval_shape(lambda: jax.tree.map(lambda x: jnp.stack([x] * num_envs),
                                                      _transition(obs_dim)))
    return learner_step, (q_net, q_net, opt_state, buffer_state, transitions, KEY)


def flashbax_prioritised_nstep(obs_dim: int, num_actions: int, seq_len: int, batch: int, hidden: int = 256):
    """Prioritised replay of sequences: sample, importance-weighted n-step double-Q loss, new priorities."""
    import flashbax as fbx
    import optax

    num_envs = 16
    buffer = fbx.make_prioritised_trajectory_buffer(
        add_batch_size=num_envs, sample_batch_size=batch, sample_sequence_length=seq_len, period=1,
        min_length_time_axis=seq_len, max_size=100_000)
    opt = optax.adam(6.25e-5, eps=1.5e-4)

    def nstep_errors(q_net, target_net, seq):
        obs, action = seq["obs"][:, 0], seq["action"][:, 0]
        q = jnp.take_along_axis(_mlp(q_net, obs), action[:, None], -1)[:, 0]
        alive = jnp.cumprod(1.0 - seq["done"][:, :-1], axis=1)
        discounts = 0.99 ** jnp.arange(seq_len - 1)
        n_return = seq["reward"][:, 0] + jnp.sum(seq["reward"][:, 1:] * alive * discounts * 0.99, 1)
        last = seq["obs"][:, -1]
        boot = jnp.take_along_axis(_mlp(target_net, last), jnp.argmax(_mlp(q_net, last), -1)[:, None], -1)
        target = n_return + alive[:, -1] * 0.99 ** seq_len * boot[:, 0]
        return q - jax.lax.stop_gradient(target)

    def loss_fn(q_net, target_net, seq, weights):
        errors = nstep_errors(q_net, target_net, seq)
        return jnp.mean(weights * optax.huber_loss(errors)), jnp.abs(errors)

    def learner_step(q_net, target_net, opt_state, buffer_state, key):
        sample = buffer.sample(buffer_state, key)
        weights = (1.0 / (sample.probabilities * buffer_state.sum_tree_state.nodes.shape[0] + 1e-6)) ** 0.4
        weights = weights / weights.max()
        q_net, opt_state, (loss, errors) = _apply_grads(opt, loss_fn, q_net, opt_state, target_net,
                                                        sample.experience, weights, has_aux=True)
        buffer_state = buffer.set_priorities(buffer_state, sample.indices, errors + 1e-6)
        return q_net, opt_state, buffer_state, loss

    q_net, opt_state = _train_state(opt, _shapes(_mlp_init, (obs_dim, hidden, hidden, num_actions)))
    buffer_state = jax.eval_shape(lambda: buffer.init(_transition(obs_dim)))
    return learner_step, (q_net, q_net, opt_state, buffer_state, KEY)


def flashbax_frame_stack_bc(obs_dim: int, num_actions: int, chunk: int, stack: int, batch: int):
    """Behaviour cloning from a flashbax trajectory buffer: add a rollout chunk, sample stacked windows."""
    import flashbax as fbx
    import optax

    num_envs = 8
    buffer = fbx.make_trajectory_buffer(add_batch_size=num_envs, sample_batch_size=batch,
                                        sample_sequence_length=stack, period=1, min_length_time_axis=stack,
                                        max_size=50_000)
    opt = optax.adamw(3e-4)

    def loss_fn(policy, window):
        stacked = window["obs"].reshape(batch, -1)  # the last `stack` frames, oldest first
        return optax.softmax_cross_entropy_with_integer_labels(_mlp(policy, stacked),
                                                               window["action"][:, -1]).mean()

    def step(policy, opt_state, buffer_state, rollout, key):
        buffer_state = buffer.add(buffer_state, rollout)
        window = buffer.sample(buffer_state, key).experience
        policy, opt_state, loss = _apply_grads(opt, loss_fn, policy, opt_state, window)
        return policy, opt_state, buffer_state, loss

    policy, opt_state = _train_state(opt, _shapes(_mlp_init, (obs_dim * stack, 256, num_actions)))
    buffer_state = jax.eval_shape(lambda: buffer.init(_transition(obs_dim)))
    rollout = jax.eval_shape(lambda: jax.tree.map(lambda x: jnp.zeros((num_envs, chunk, *x.shape), x.dtype),
                                                  _transition(obs_dim)))
    return step, (policy, opt_state, buffer_state, rollout, KEY)


def _gaussian_actor(actor, obs, key):
    """Tanh-squashed Gaussian action and its log-probability (SAC's reparameterised policy)."""
    mean, log_std = jnp.split(_mlp(actor, obs), 2, -1)
    std = jnp.exp(jnp.clip(log_std, -5.0, 2.0))
    raw = mean + std * jax.random.normal(key, mean.shape)
    logp = jnp.sum(-0.5 * ((raw - mean) / std) ** 2 - jnp.log(std) - 0.5 * np.log(2 * np.pi), -1)
    action = jnp.tanh(raw)
    return action, logp - jnp.sum(jnp.log(1 - action ** 2 + 1e-6), -1)


def flashbax_brax_sac(env_name: str, backend: str, num_envs: int, batch: int, hidden: int = 256):
    """SAC on brax with a flashbax item buffer: act + env step, add, sample, critic / actor / alpha steps."""
    import flashbax as fbx
    import optax

    env = _brax_env(env_name, backend)
    obs_dim, act_dim = env.observation_size, env.action_size
    buffer = fbx.make_item_buffer(max_length=100_000, min_length=batch, sample_batch_size=batch,
                                  add_batches=True)
    opt = optax.adam(3e-4)

    def q_values(critics, obs, action):
        x = jnp.concatenate([obs, action], -1)
        return jnp.stack([_mlp(c, x)[..., 0] for c in critics])

    def critic_loss(critics, target_critics, actor, log_alpha, tr, key):
        next_action, next_logp = _gaussian_actor(actor, tr["next_obs"], key)
        next_q = q_values(target_critics, tr["next_obs"], next_action).min(0) - jnp.exp(log_alpha) * next_logp
        target = jax.lax.stop_gradient(tr["reward"] + 0.99 * (1 - tr["done"]) * next_q)
        return jnp.mean((q_values(critics, tr["obs"], tr["action"]) - target) ** 2)

    def actor_loss(actor, critics, log_alpha, obs, key):
        action, logp = _gaussian_actor(actor, obs, key)
        return jnp.mean(jnp.exp(log_alpha) * logp - q_values(critics, obs, action).min(0)), logp

    def alpha_loss(log_alpha, logp):
        return -jnp.mean(log_alpha * jax.lax.stop_gradient(logp - act_dim))

    def train_step(sys, nets, opt_states, buffer_state, env_state, key):
        k_act, k_sample, k_critic, k_actor = jax.random.split(key, 4)
        with _with_sys(env, sys):
            action, _ = _gaussian_actor(nets["actor"], env_state.obs, k_act)
            next_state = jax.vmap(env.step)(env_state, action)
        buffer_state = buffer.add(buffer_state, {
            "obs": env_state.obs, "action": action, "reward": next_state.reward, "done": next_state.done,
            "next_obs": next_state.obs})
        tr = buffer.sample(buffer_state, k_sample).experience
        log_alpha = nets["log_alpha"]
        critics, c_state, q_loss = _apply_grads(opt, critic_loss, nets["critics"], opt_states["critics"],
                                                nets["target"], nets["actor"], log_alpha, tr, k_critic)
        actor, a_state, (pi_loss, logp) = _apply_grads(opt, actor_loss, nets["actor"], opt_states["actor"],
                                                       critics, log_alpha, tr["obs"], k_actor, has_aux=True)
        log_alpha, t_state, _ = _apply_grads(opt, alpha_loss, log_alpha, opt_states["log_alpha"], logp)
        nets = {"critics": critics, "target": _polyak(nets["target"], critics), "actor": actor,
                "log_alpha": log_alpha}
        return nets, {"critics": c_state, "actor": a_state, "log_alpha": t_state}, buffer_state, next_state, \
            (q_loss, pi_loss)

    def init_nets(key):
        ks = jax.random.split(key, 3)
        critics = [_mlp_init(k, (obs_dim + act_dim, hidden, hidden, 1)) for k in ks[:2]]
        return {"critics": critics, "target": critics, "actor": _mlp_init(ks[2], (obs_dim, hidden, hidden,
                                                                                    2 * act_dim)),
                "log_alpha": jnp.zeros(())}

    nets = _shapes(init_nets)
    opt_states = {k: jax.eval_shape(opt.init, nets[k]) for k in ("critics", "actor", "log_alpha")}
    item = {"obs": jnp.zeros(obs_dim), "action": jnp.zeros(act_dim), "reward": jnp.zeros(()),
            "done": jnp.zeros(()), "next_obs": jnp.zeros(obs_dim)}
    buffer_state = jax.eval_shape(lambda: buffer.init(item))
    return train_step, (_abstract(env.sys), nets, opt_states, buffer_state, _brax_states(env, num_envs), KEY)


# (builder, sizes) of each program measured
PROGRAMS = (
    (brax_vmapped_step, dict(env_name="inverted_pendulum", backend="positional", batch=8)),  # ~4 s
    (brax_random_rollout, dict(env_name="halfcheetah", backend="positional", batch=16, steps=100)),  # ~20 s
    (brax_ppo_update,
     dict(env_name="hopper", backend="spring", num_envs=32, unroll=20, minibatches=4)),  # ~12 s
    (brax_apg_step,
     dict(env_name="inverted_double_pendulum", backend="generalized", batch=8, horizon=50)),  # ~16 s
    (mjx_batched_step, dict(links=4, batch=32, substeps=4)),  # ~7 s
    (mjx_shooting_step, dict(links=3, horizon=50)),  # ~16 s
    (craftax_random_rollout, dict(env_name="Craftax-Classic-Symbolic-v1", batch=8, steps=32)),  # ~8 s
    (craftax_pixels_step, dict(env_name="Craftax-Classic-Pixels-v1", batch=4)),  # ~8 s
    (craftax_random_rollout, dict(env_name="Craftax-Symbolic-v1", batch=8, steps=32)),  # ~25 s
    (craftax_actor_critic_update, dict(env_name="Craftax-Symbolic-v1", num_envs=8, steps=16)),  # ~28 s
    (xminigrid_vmapped_step, dict(env_id="MiniGrid-Empty-5x5", batch=8)),  # ~1.2 s
    (xminigrid_rnn_rollout, dict(env_id="XLand-MiniGrid-R4-13x13", num_envs=16, steps=64)),  # ~4 s
    (xminigrid_ppo_update, dict(env_id="MiniGrid-FourRooms", num_envs=16, steps=32, epochs=2)),  # ~5 s
    (jumanji_random_rollout, dict(env_id="Game2048-v1", batch=8, steps=10)),  # ~1 s
    (jumanji_random_rollout, dict(env_id="Minesweeper-v0", batch=16, steps=20)),  # ~1 s
    (jumanji_random_rollout, dict(env_id="RubiksCube-v0", batch=16, steps=20)),  # ~2 s
    (jumanji_snake_a2c, dict(batch=16, steps=16)),  # ~2 s
    (jumanji_tsp_reinforce, dict(num_cities=10, batch=8, layers=1, dim=64)),  # ~2 s
    (jumanji_warehouse_rollout, dict(num_agents=4, batch=8, steps=32)),  # ~3 s
    (flashbax_dqn_step,
     dict(obs_dim=8, num_actions=4, num_envs=8, batch=64, capacity=10_000, hidden=64)),  # ~0.7 s
    (flashbax_prioritised_nstep, dict(obs_dim=16, num_actions=4, seq_len=3, batch=32, hidden=64)),  # ~0.6 s
    (flashbax_prioritised_nstep, dict(obs_dim=64, num_actions=18, seq_len=10, batch=256)),  # ~0.7 s
    (flashbax_frame_stack_bc, dict(obs_dim=32, num_actions=6, chunk=16, stack=4, batch=64)),  # ~0.7 s
    (flashbax_brax_sac,
     dict(env_name="inverted_pendulum", backend="positional", num_envs=16, batch=256)),  # ~6 s
)
# the pip package of each builder's name prefix
LIBRARIES = {"brax": "brax", "mjx": "mujoco-mjx", "craftax": "craftax", "xminigrid": "xminigrid",
             "jumanji": "jumanji", "flashbax": "flashbax"}

OUTSIDE_FAMILIES = register_builders(PROGRAMS, "outside", libraries_by_prefix(PROGRAMS, LIBRARIES),
                                     prefix="outside_b")
