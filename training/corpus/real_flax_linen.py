"""Flax Linen programs as its users write them: a causal decoder language model's AdamW
train step (layers as a Python loop, lifted ``nn.scan``, or ``nn.remat`` per block) and
a convolutional classifier with batch-norm state trained with SGD momentum.

Unlike ``bench/evaluations/library_programs.py`` (a pre-norm encoder, forward or gradient only), these
carry token embeddings, causal masks and the optimizer update in the same program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import optax_step, real_family, uses
from .registry import param_grid, sds

_VOCAB = 512


def build_flax_decoder_step(layers: int, d: int, layout: str, seq: int = 64, batch: int = 4):
    """AdamW step of a GPT-style decoder (Embed, causal self-attention, RMSNorm, gated MLP)
    on next-token cross-entropy."""
    import flax.linen as nn
    import optax

    if layout not in ("loop", "scan", "remat"):
        raise ValueError(f"layout must be loop, scan or remat, got {layout!r}")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
            h = nn.RMSNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=max(d // 64, 1))(h, h, mask=mask)
            h = nn.RMSNorm()(x)
            h = nn.silu(nn.Dense(3 * d)(h)) * nn.Dense(3 * d)(h)
            return x + nn.Dense(d)(h), None

    class Decoder(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            embed = nn.Embed(_VOCAB, d)
            x = embed(tokens)
            if layout == "scan":
                x, _ = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True},
                               length=layers)()(x, None)
            else:
                block = nn.remat(Block) if layout == "remat" else Block
                for _ in range(layers):
                    x, _ = block()(x, None)
            return embed.attend(nn.RMSNorm()(x))

    model = Decoder()
    tokens = sds((batch, seq + 1), np.int32)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((batch, seq), jnp.int32)))
    optimizer = optax.adamw(3e-4, weight_decay=0.1)

    def loss(params, tokens):
        logits = model.apply(params, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    step = optax_step(loss, optimizer)

    def fn(params, opt_state, tokens):
        return step(params, opt_state, tokens)

    return fn, (params, jax.eval_shape(optimizer.init, params), tokens)


def build_flax_bn_cnn_step(stages: int, channels: int, image: int = 32, batch: int = 16):
    """SGD-momentum step of a VGG-style Linen CNN: per stage two Conv + BatchNorm + relu
    and a max pool; batch statistics updated through ``mutable=["batch_stats"]``."""
    import flax.linen as nn
    import optax

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool):
            for s in range(stages):
                width = channels * 2 ** min(s, 3)
                for _ in range(2):
                    x = nn.Conv(width, (3, 3))(x)
                    x = nn.relu(nn.BatchNorm(use_running_average=not train)(x))
                if x.shape[1] > 2:
                    x = nn.max_pool(x, (2, 2), (2, 2))
            return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))

    model = CNN()
    x = sds((batch, image, image, 3))
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(x.shape), False))
    optimizer = optax.sgd(0.05, momentum=0.9, nesterov=True)

    def fn(params, batch_stats, opt_state, x, labels):
        def loss(params):
            logits, new = model.apply({"params": params, "batch_stats": batch_stats}, x, True,
                                      mutable=["batch_stats"])
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return ce, new["batch_stats"]

        (value, batch_stats), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), batch_stats, opt_state, value

    params = variables["params"]
    return fn, (params, variables["batch_stats"], jax.eval_shape(optimizer.init, params), x,
                sds((batch,), np.int32))


if uses("flax", "flax", "optax"):
    real_family(
        "flax", "flax_decoder_step",
        "Flax Linen causal decoder LM AdamW step; layers as a Python loop, nn.scan or nn.remat.",
        build_flax_decoder_step,
        param_grid(layers=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128), d=(128, 256),
                   layout=("loop", "scan", "remat"),
                   where=lambda p: p["layout"] == "loop" or p["layers"] in (4, 16, 48)))
    real_family(
        "flax", "flax_bn_cnn_step",
        "Flax Linen VGG-style CNN with BatchNorm state, SGD-momentum train step.",
        build_flax_bn_cnn_step,
        param_grid(stages=(1, 2, 3, 4, 5, 6), channels=(16, 32, 64)))
