"""Optax programs as its users write them: its optimizers and losses around a small
model written in plain JAX, so the optimizer and loss code dominates.

The optimizer zoo (LAMB, Lion, Adafactor, Yogi, AdaBelief, RAdam, NovoGrad) on MLPs of
many leaves; a partitioned optimizer (``multi_transform``) wrapped in gradient
accumulation (``MultiSteps``) with an EMA of the parameters; and the CTC loss (a scan over
time) under ``grad``. The bench's clipped AdamW and L-BFGS programs stay out.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import optax_step, real_family, uses
from .registry import param_grid, sds

_OPTIMIZERS = ("lamb", "lion", "adafactor", "yogi", "adabelief", "radam", "novograd")


def _mlp_params(layers: int, width: int, features: int = 32):
    sizes = [features] + [width] * layers + [1]
    return [{"w": sds((a, b)), "b": sds((b,))} for a, b in zip(sizes[:-1], sizes[1:])]


def _mlp_loss(params, x, y):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    pred = (x @ params[-1]["w"] + params[-1]["b"])[:, 0]
    return jnp.mean((pred - y) ** 2)


def _zoo(name: str):
    import optax

    return {"lamb": lambda: optax.lamb(1e-3, weight_decay=1e-4), "lion": lambda: optax.lion(1e-4),
            "adafactor": lambda: optax.adafactor(1e-3), "yogi": lambda: optax.yogi(1e-3),
            "adabelief": lambda: optax.adabelief(1e-3), "radam": lambda: optax.radam(1e-3),
            "novograd": lambda: optax.novograd(1e-3)}[name]()


def build_optax_zoo_step(optimizer: str, layers: int, width: int = 128, batch: int = 64):
    """One step of an optax optimizer from the zoo on an MLP regression."""
    opt = _zoo(optimizer)
    params = _mlp_params(layers, width)
    step = optax_step(_mlp_loss, opt)

    def fn(params, opt_state, x, y):
        return step(params, opt_state, x, y)

    return fn, (params, jax.eval_shape(opt.init, params), sds((batch, 32)), sds((batch,)))


def build_optax_partitioned_step(layers: int, accumulate: int, width: int = 128, batch: int = 64):
    """Gradient accumulation over ``accumulate`` micro-steps (``optax.MultiSteps``) of a
    ``multi_transform``: clipped AdamW with a one-cycle schedule for weights, SGD for
    biases; then an EMA of the parameters (``optax.ema``) as a separate transform."""
    import optax

    labels = [{"w": "weights", "b": "biases"} for _ in range(layers + 1)]
    inner = optax.multi_transform(
        {"weights": optax.chain(optax.clip_by_global_norm(1.0),
                                optax.adamw(optax.cosine_onecycle_schedule(10_000, 1e-3))),
         "biases": optax.sgd(1e-2)}, labels)
    opt = optax.MultiSteps(inner, every_k_schedule=accumulate)
    ema = optax.ema(0.999)
    params = _mlp_params(layers, width)
    step = optax_step(_mlp_loss, opt)

    def fn(params, opt_state, ema_state, x, y):
        params, opt_state, value = step(params, opt_state, x, y)
        averaged, ema_state = ema.update(params, ema_state)
        return params, opt_state, ema_state, averaged, value

    return fn, (params, jax.eval_shape(opt.init, params), jax.eval_shape(ema.init, params),
                sds((batch, 32)), sds((batch,)))


def build_optax_ctc_grad(frames: int, label_len: int, classes: int = 32, batch: int = 8,
                         hidden: int = 64):
    """Gradient of ``optax.ctc_loss`` (forward recursion over ``frames`` in a scan) for a
    linear-tanh frame encoder, with padding masks for logits and labels."""
    import optax

    def loss(params, feats, labels, logit_pad, label_pad):
        h = jnp.tanh(feats @ params["w1"])
        logits = h @ params["w2"]
        return jnp.mean(optax.ctc_loss(logits, logit_pad, labels, label_pad))

    def fn(params, feats, labels, logit_pad, label_pad):
        return jax.value_and_grad(loss)(params, feats, labels, logit_pad, label_pad)

    params = {"w1": sds((40, hidden)), "w2": sds((hidden, classes))}
    return fn, (params, sds((batch, frames, 40)), sds((batch, label_len), np.int32),
                sds((batch, frames)), sds((batch, label_len)))


if uses("optax", "optax"):
    real_family("optax", "optax_zoo_step",
                "One step of an optax optimizer (LAMB, Lion, Adafactor, Yogi, ...) on an MLP.",
                build_optax_zoo_step,
                param_grid(optimizer=_OPTIMIZERS, layers=(2, 8, 32, 96, 160)))
    real_family("optax", "optax_partitioned_step",
                "optax.MultiSteps around multi_transform (clipped AdamW / SGD) plus an EMA.",
                build_optax_partitioned_step,
                param_grid(layers=(2, 8, 32, 64, 128), accumulate=(1, 4)))
    real_family("optax", "optax_ctc_grad",
                "Gradient of optax.ctc_loss over padded frame and label sequences.",
                build_optax_ctc_grad,
                param_grid(frames=(16, 64, 256, 1024), label_len=(4, 32)))
