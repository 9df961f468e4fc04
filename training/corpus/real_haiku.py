"""Haiku programs as its users write them: ``hk.transform`` / ``transform_with_state``
models trained with optax.

A stacked-GRU sequence model (``hk.DeepRNN``, unrolled by ``static_unroll`` or scanned by
``dynamic_unroll``), a thin ResNet of configurable depth from ``hk.nets.ResNet`` with its
batch-norm state, and a convolutional VQ-VAE around ``hk.nets.VectorQuantizerEMA``. The
bench's Haiku programs (ResNet18/50 at full width, one LSTM) stay out.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import optax_step, real_family, uses
from .registry import param_grid, sds


def build_haiku_gru_stack(steps: int, depth: int, unroll: str, hidden: int = 64, batch: int = 8):
    """Adam step of a ``depth``-layer GRU stack predicting the next input vector."""
    import haiku as hk
    import optax

    if unroll not in ("static", "dynamic"):
        raise ValueError(f"unroll must be static or dynamic, got {unroll!r}")
    run = hk.static_unroll if unroll == "static" else hk.dynamic_unroll

    def forward(xs):
        core = hk.DeepRNN([hk.GRU(hidden) for _ in range(depth)])
        outputs, _ = run(core, xs, core.initial_state(batch))
        return hk.Linear(xs.shape[-1])(outputs)

    model = hk.without_apply_rng(hk.transform(forward))
    xs = sds((steps + 1, batch, 16))
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((steps, batch, 16))))
    optimizer = optax.adam(1e-3)
    step = optax_step(lambda p, xs: jnp.mean((model.apply(p, xs[:-1]) - xs[1:]) ** 2), optimizer)

    def fn(params, opt_state, xs):
        return step(params, opt_state, xs)

    return fn, (params, jax.eval_shape(optimizer.init, params), xs)


def build_haiku_thin_resnet_step(blocks: int, bottleneck: bool, image: int = 32, batch: int = 8):
    """SGD-momentum step of ``hk.nets.ResNet`` with ``blocks`` blocks per group and
    narrow channels, batch-norm state threaded through ``transform_with_state``."""
    import haiku as hk
    import optax

    scale = 4 if bottleneck else 1
    channels = tuple(16 * scale * 2**g for g in range(4))

    def forward(x, is_training):
        net = hk.nets.ResNet(blocks_per_group=(blocks,) * 4, num_classes=10, bottleneck=bottleneck,
                             channels_per_group=channels, use_projection=(True,) * 4)
        return net(x, is_training=is_training)

    model = hk.transform_with_state(forward)
    x = sds((batch, image, image, 3))
    params, state = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(x.shape), True))
    optimizer = optax.sgd(0.1, momentum=0.9)

    def fn(params, state, opt_state, x, labels):
        def loss(p):
            logits, new_state = model.apply(p, state, None, x, True)
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return ce, new_state

        (value, state), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), state, opt_state, value

    return fn, (params, state, jax.eval_shape(optimizer.init, params), x, sds((batch,), np.int32))


def build_haiku_vqvae_step(channels: int, codes: int, layers: int = 2, image: int = 32,
                           batch: int = 8):
    """Adam step of a VQ-VAE: strided Conv2D encoder, ``VectorQuantizerEMA`` (codebook EMA
    in the state), ``Conv2DTranspose`` decoder; reconstruction plus commitment loss."""
    import haiku as hk
    import optax

    def forward(x, is_training):
        h = x
        for i in range(layers):
            h = jax.nn.relu(hk.Conv2D(channels * 2**i, 4, stride=2)(h))
        h = hk.Conv2D(32, 1)(h)
        vq = hk.nets.VectorQuantizerEMA(32, codes, commitment_cost=0.25, decay=0.99)(
            h, is_training=is_training)
        h = vq["quantize"]
        for i in reversed(range(layers)):
            h = jax.nn.relu(hk.Conv2DTranspose(channels * 2**i, 4, stride=2)(h))
        recon = hk.Conv2D(3, 3)(h)
        return jnp.mean((recon - x) ** 2) + vq["loss"]

    model = hk.transform_with_state(forward)
    x = sds((batch, image, image, 3))
    params, state = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(x.shape), True))
    optimizer = optax.adam(2e-4)

    def fn(params, state, opt_state, x):
        (value, state), grads = jax.value_and_grad(
            lambda p: model.apply(p, state, None, x, True), has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), state, opt_state, value

    return fn, (params, state, jax.eval_shape(optimizer.init, params), x)


if uses("dm-haiku", "haiku", "optax"):
    real_family("dm-haiku", "haiku_gru_stack_step",
                "Haiku DeepRNN of GRUs, static_unroll or dynamic_unroll, Adam step.",
                build_haiku_gru_stack,
                # static 128 x 1 compiled in 210 s here: unrolled, 64 steps of one layer is the top
                param_grid(steps=(8, 16, 32, 64, 128), depth=(1, 2, 4), unroll=("static", "dynamic"),
                           where=lambda p: (p["steps"] <= 32 or p["steps"] == 64 and p["depth"] == 1
                                            if p["unroll"] == "static" else p["steps"] in (16, 128))))
    real_family("dm-haiku", "haiku_thin_resnet_step",
                "hk.nets.ResNet with narrow channels and 1-6 blocks per group, SGD step.",
                build_haiku_thin_resnet_step,
                param_grid(blocks=(1, 2, 3, 4, 6), bottleneck=(False, True)))
    real_family("dm-haiku", "haiku_vqvae_step",
                "Haiku conv VQ-VAE with VectorQuantizerEMA state, Adam step.",
                build_haiku_vqvae_step,
                param_grid(channels=(16, 32, 64), codes=(64, 512), layers=(2, 3)))
