"""What the fourth outside suite's program files share (`outside_programs_d1.py`,
`_d2.py`): abstract argument shapes, plain jax.numpy MLPs, an optax train step. Importing
it registers no family and imports no outside library."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.training.corpus.registry import sds

KEY = sds((2,), np.uint32)


def f32(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape)


def i32(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape, np.int32)


def c64(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape, np.complex64)


def shapes(init, *args):
    """Abstract result of `init(PRNGKey(0), *args)`, without materialising it."""
    return jax.eval_shape(lambda: init(jax.random.PRNGKey(0), *args))


def mlp_init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [{"w": jax.random.normal(k, (a, b)) / np.sqrt(a), "b": jnp.zeros(b)}
            for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def mlp(params, x, act=jnp.tanh):
    for layer in params[:-1]:
        x = act(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def apply_grads(opt, loss_fn, params, opt_state, *inputs):
    """One optax step on `loss_fn(params, *inputs)`; returns (params, opt_state, loss)."""
    import optax

    loss, grads = jax.value_and_grad(loss_fn)(params, *inputs)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def train(opt, loss_fn, params):
    """A train step `(params, opt_state, *batch) -> (params, opt_state, loss)` on `loss_fn`
    and the abstract (params, optimizer state) it takes."""
    def update(params, opt_state, *batch):
        return apply_grads(opt, loss_fn, params, opt_state, *batch)

    return update, (params, jax.eval_shape(opt.init, params))


def gae(rewards, values, dones, last_value, gamma=0.99, lam=0.95):
    """Generalised advantage estimates of a time-major rollout; returns (advantages, targets)."""
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    not_done = 1.0 - dones.astype(jnp.float32)
    deltas = rewards + gamma * next_values * not_done - values

    def back(adv, x):
        adv = x[0] + gamma * lam * x[1] * adv
        return adv, adv

    _, adv = jax.lax.scan(back, jnp.zeros_like(last_value), (deltas, not_done), reverse=True)
    return adv, adv + values


def clipped_surrogate(logits, values, traj, adv, targets):
    """PPO's loss on a rollout: the clipped-surrogate policy loss on normalised advantages
    plus half the value error."""
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), traj["action"][..., None], -1)[..., 0]
    ratio, adv = jnp.exp(logp - traj["logp"]), (adv - adv.mean()) / (adv.std() + 1e-8)
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv)
    return -surrogate.mean() + 0.5 * jnp.mean((values - targets) ** 2)
