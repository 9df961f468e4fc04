"""Flax NNX train steps as its users write them: modules built eagerly from ``nnx.Rngs``
(shape-only here, through ``nnx.eval_shape``), ``nnx.Optimizer`` updates, and the
split/merge of the graph state around a pure step.

A vision transformer (patch convolution, ``nnx.MultiHeadAttention``) and a deep residual
MLP with dropout and layer norm; ``bench/evaluations/library_programs.py`` has only an NNX CNN.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from .real_support import real_family, uses
from .registry import param_grid, sds


def _nnx_step(make_model: Callable, optimizer, loss: Callable):
    """``(fn, state)`` for one optimizer step of the model ``make_model(rngs)``: ``fn``
    merges the graph state, takes ``nnx.value_and_grad`` of ``loss(model, *batch)``,
    updates, and returns the loss with the new state."""
    from flax import nnx

    def make():
        model = make_model(nnx.Rngs(0))
        return model, nnx.Optimizer(model, optimizer, wrt=nnx.Param)

    graphdef, state = nnx.split(nnx.eval_shape(make))

    def fn(state, *batch):
        model, opt = nnx.merge(graphdef, state)
        value, grads = nnx.value_and_grad(lambda m: loss(m, *batch))(model)
        opt.update(model, grads)
        return value, nnx.state((model, opt))

    return fn, state


def build_nnx_vit_step(layers: int, d: int, image: int = 32, patch: int = 4, batch: int = 8):
    """AdamW step of a ViT classifier: patch Conv, learned position embedding, pre-norm
    attention blocks, mean pooling and a linear head."""
    import optax
    from flax import nnx

    tokens = (image // patch) ** 2

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.norm1, self.norm2 = nnx.LayerNorm(d, rngs=rngs), nnx.LayerNorm(d, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(max(d // 64, 1), d, decode=False, rngs=rngs)
            self.up, self.down = nnx.Linear(d, 4 * d, rngs=rngs), nnx.Linear(4 * d, d, rngs=rngs)

        def __call__(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.down(nnx.gelu(self.up(self.norm2(x))))

    class ViT(nnx.Module):
        def __init__(self, rngs):
            self.patches = nnx.Conv(3, d, (patch, patch), strides=(patch, patch), rngs=rngs)
            self.position = nnx.Param(jnp.zeros((tokens, d)))
            self.blocks = nnx.List([Block(rngs) for _ in range(layers)])
            self.norm = nnx.LayerNorm(d, rngs=rngs)
            self.head = nnx.Linear(d, 10, rngs=rngs)

        def __call__(self, x):
            x = self.patches(x).reshape(x.shape[0], tokens, d) + self.position[...]
            for block in self.blocks:
                x = block(x)
            return self.head(jnp.mean(self.norm(x), axis=1))

    def loss(model, x, labels):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), labels).mean()

    fn, state = _nnx_step(ViT, optax.adamw(1e-3), loss)
    return fn, (state, sds((batch, image, image, 3)), sds((batch,), np.int32))


def build_nnx_residual_mlp_step(depth: int, width: int, batch: int = 64):
    """Adam step of a residual MLP (Linear, LayerNorm, gelu, Dropout per block) on an MSE
    loss; the dropout key stream is carried in the model's ``nnx.Rngs``."""
    import optax
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.inp = nnx.Linear(32, width, rngs=rngs)
            self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(depth)])
            self.norms = nnx.List([nnx.LayerNorm(width, rngs=rngs) for _ in range(depth)])
            self.dropout = nnx.Dropout(0.1, rngs=nnx.Rngs(dropout=1))
            self.out = nnx.Linear(width, 1, rngs=rngs)

        def __call__(self, x):
            h = self.inp(x)
            for layer, norm in zip(self.layers, self.norms, strict=True):
                h = h + self.dropout(nnx.gelu(layer(norm(h))))
            return self.out(h)[:, 0]

    def loss(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    fn, state = _nnx_step(MLP, optax.adam(1e-3), loss)
    return fn, (state, sds((batch, 32)), sds((batch,)))


if uses("flax", "flax", "optax"):
    real_family("flax", "nnx_vit_step",
                "Flax NNX vision transformer, AdamW step through nnx.Optimizer.",
                build_nnx_vit_step,
                param_grid(layers=(1, 2, 4, 8, 12, 16, 24, 32), d=(64, 192)))
    real_family("flax", "nnx_residual_mlp_step",
                "Flax NNX residual MLP with LayerNorm and Dropout, Adam step.",
                build_nnx_residual_mlp_step,
                param_grid(depth=(2, 4, 8, 16, 32, 64, 96, 192), width=(128, 512)))
