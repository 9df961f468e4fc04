"""Equinox programs as its users write them: modules are pytrees, built shape-only with
``eqx.filter_eval_shape``, split into arrays and static parts, trained with
``eqx.filter_value_and_grad`` and optax.

A transformer of ``eqx.nn`` layers vmapped over the batch, an ensemble of CNNs trained at
once under ``eqx.filter_vmap``, and a deep MLP whose identical layers are either a Python
loop or one ``lax.scan`` over layers stacked by ``filter_vmap`` (Equinox's documented way
to cut compile time). The bench has only an Equinox GRU and a Diffrax vector field.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import real_family, uses
from .registry import param_grid, sds


def _is_shape(x) -> bool:
    return isinstance(x, jax.ShapeDtypeStruct)


def _eqx_step(make: Callable, loss: Callable, optimizer):
    """``(fn, (params, opt_state))`` for an optax step of the module ``make(key)``;
    ``loss(model, *batch)``."""
    import equinox as eqx
    import optax

    params, static = eqx.partition(eqx.filter_eval_shape(make, jax.random.key(0)), _is_shape)

    def fn(params, opt_state, *batch):
        value, grads = eqx.filter_value_and_grad(
            lambda p: loss(eqx.combine(p, static), *batch))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return fn, (params, jax.eval_shape(optimizer.init, params))


def build_eqx_transformer_step(layers: int, d: int, seq: int = 64, batch: int = 8):
    """Adam step of a pre-norm transformer regressor from ``eqx.nn`` attention, norms
    and linears; each example runs under ``jax.vmap``."""
    import equinox as eqx
    import optax

    class Block(eqx.Module):
        attn: eqx.nn.MultiheadAttention
        norm1: eqx.nn.LayerNorm
        norm2: eqx.nn.LayerNorm
        mlp: eqx.nn.MLP

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.attn = eqx.nn.MultiheadAttention(max(d // 32, 1), d, key=k1)
            self.norm1, self.norm2 = eqx.nn.LayerNorm(d), eqx.nn.LayerNorm(d)
            self.mlp = eqx.nn.MLP(d, d, 4 * d, 1, activation=jax.nn.gelu, key=k2)

        def __call__(self, x):
            h = jax.vmap(self.norm1)(x)
            x = x + self.attn(h, h, h)
            return x + jax.vmap(self.mlp)(jax.vmap(self.norm2)(x))

    def make(key):
        keys = jax.random.split(key, layers + 1)
        return [eqx.nn.Linear(16, d, key=keys[0])] + [Block(k) for k in keys[1:]]

    def loss(model, x, y):
        def one(x):
            h = jax.vmap(model[0])(x)
            for block in model[1:]:
                h = block(h)
            return jnp.mean(h)

        return jnp.mean((jax.vmap(one)(x) - y) ** 2)

    fn, state = _eqx_step(make, loss, optax.adam(1e-3))
    return fn, (*state, sds((batch, seq, 16)), sds((batch,)))


def build_eqx_cnn_ensemble_step(members: int, depth: int, channels: int = 16, image: int = 28,
                                batch: int = 16):
    """One Adam step of ``members`` independent CNNs (``eqx.nn.Conv2d``, ``MaxPool2d``)
    stacked by ``filter_vmap`` and trained together on the same batch."""
    import equinox as eqx
    import optax

    def make_one(key):
        keys = jax.random.split(key, depth + 1)
        convs = [eqx.nn.Conv2d(1 if i == 0 else channels, channels, 3, padding=1, key=k)
                 for i, k in enumerate(keys[:-1])]
        return convs, eqx.nn.Linear(channels, 10, key=keys[-1])

    def make(key):
        return eqx.filter_vmap(make_one)(jax.random.split(key, members))

    pool = eqx.nn.MaxPool2d(2, 2)

    def member_loss(model, x, labels):
        convs, head = model

        def logits(img):
            for conv in convs:
                img = jax.nn.relu(conv(img))
                if img.shape[-1] >= 4:
                    img = pool(img)
            return head(jnp.mean(img, axis=(1, 2)))

        logp = jax.nn.log_softmax(jax.vmap(logits)(x))
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def loss(ensemble, x, labels):
        return jnp.sum(eqx.filter_vmap(member_loss, in_axes=(eqx.if_array(0), None, None))(
            ensemble, x, labels))

    fn, state = _eqx_step(make, loss, optax.adam(1e-3))
    return fn, (*state, sds((batch, 1, image, image)), sds((batch,), np.int32))


def build_eqx_deep_mlp_step(depth: int, width: int, layout: str, batch: int = 32):
    """AdamW step of ``depth`` identical residual ``eqx.nn.Linear`` layers, as a Python
    loop over a list ("loop") or a ``lax.scan`` over the layers stacked by ``filter_vmap``
    ("scan")."""
    import equinox as eqx
    import optax

    if layout not in ("loop", "scan"):
        raise ValueError(f"layout must be loop or scan, got {layout!r}")

    def make(key):
        keys = jax.random.split(key, depth)
        if layout == "scan":
            return eqx.filter_vmap(lambda k: eqx.nn.Linear(width, width, key=k))(keys)
        return [eqx.nn.Linear(width, width, key=k) for k in keys]

    def loss(layers, x):
        if layout == "scan":
            arrays, static = eqx.partition(layers, eqx.is_array)

            def body(h, layer_arrays):
                layer = eqx.combine(layer_arrays, static)
                return h + jnp.tanh(jax.vmap(layer)(h)), None

            x, _ = jax.lax.scan(body, x, arrays)
        else:
            for layer in layers:
                x = x + jnp.tanh(jax.vmap(layer)(x))
        return jnp.mean(x**2)

    fn, state = _eqx_step(make, loss, optax.adamw(1e-3))
    return fn, (*state, sds((batch, width)))


if uses("equinox", "equinox", "optax"):
    real_family("equinox", "eqx_transformer_step",
                "Equinox transformer of eqx.nn layers vmapped over the batch, Adam step.",
                build_eqx_transformer_step,
                param_grid(layers=(1, 2, 4, 8, 12, 16, 24, 32), d=(64, 128)))
    real_family("equinox", "eqx_cnn_ensemble_step",
                "Ensemble of Equinox CNNs stacked with filter_vmap, one Adam step for all.",
                build_eqx_cnn_ensemble_step,
                param_grid(members=(1, 4, 16), depth=(1, 2, 3, 4)))
    real_family("equinox", "eqx_deep_mlp_step",
                "Deep residual MLP of eqx.nn.Linear: Python loop or lax.scan over stacked layers.",
                build_eqx_deep_mlp_step,
                param_grid(depth=(4, 16, 64, 128, 256, 512, 1024, 2048), width=(64, 256),
                           layout=("loop", "scan"),
                           where=lambda p: p["layout"] == "loop" or p["depth"] in (16, 512)))
