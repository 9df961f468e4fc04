"""Families in the style of current model code: a LLaMA-style decoder, int8-quantized
layers, per-example gradients, second derivatives, depthwise-separable convolutions with
transposed-convolution upsampling, image resizing, a VAE, a PPO update and 3-D
convolutions.

The constructs are their own: rotary embeddings (``sin``/``cos`` tables), RMSNorm and
SwiGLU; ``round``/``clip``/integer ``dot`` with int32 accumulation; ``vmap`` of
``grad`` with per-example clipping; forward-over-reverse ``hessian``; grouped
(``feature_group_count``) and input-dilated convolutions; ``jax.image.resize``;
random normal draws; a reversed ``lax.scan``; rank-5 convolutions with group norm.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .library import _cross_entropy, _forward_or_grad
from .registry import Family, check_style, param_grid, register, sds


def build_llama(layers: int, width: int, seq: int, grad: bool, batch: int = 2,
                head_dim: int = 32, vocab: int = 256) -> tuple[Callable, tuple]:
    """A decoder of ``layers`` pre-RMSNorm blocks: causal attention with rotary position
    embeddings and a SwiGLU MLP; next-token logits, or ``value_and_grad`` of the
    cross-entropy in the parameters."""
    heads = width // head_dim
    half = head_dim // 2
    freqs = 1.0 / (10000.0 ** (np.arange(half) / half))

    def rms(x, scale):
        return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale

    def rotate(x):
        angles = jnp.arange(seq)[:, None] * freqs[None, :]
        cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
        a, b = x[..., :half], x[..., half:]
        return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def block(p, x):
        h = rms(x, p["ln1"])
        q, k, v = (jnp.einsum("bsd,dhk->bshk", h, p[name]) for name in ("q", "k", "v"))
        q, k = rotate(q), rotate(k)
        scores = jnp.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(head_dim)
        causal = jnp.tril(jnp.ones((seq, seq), bool))
        weights = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        x = x + jnp.einsum("bhqs,bshk,hkd->bqd", weights, v, p["o"])
        h = rms(x, p["ln2"])
        return x + (jax.nn.silu(h @ p["gate"]) * (h @ p["up"])) @ p["down"]

    def forward(params, tokens):
        x = params["embed"][tokens]
        for p in params["blocks"]:
            x = block(p, x)
        return rms(x, params["norm"]) @ params["embed"].T

    hidden = 8 * width // 3
    params = {"embed": sds((vocab, width)), "norm": sds((width,)),
              "blocks": [{"ln1": sds((width,)), "ln2": sds((width,)),
                          "q": sds((width, heads, head_dim)), "k": sds((width, heads, head_dim)),
                          "v": sds((width, heads, head_dim)), "o": sds((heads, head_dim, width)),
                          "gate": sds((width, hidden)), "up": sds((width, hidden)),
                          "down": sds((hidden, width))} for _ in range(layers)]}
    tokens = sds((batch, seq), np.int32)
    if not grad:
        return _forward_or_grad(forward, False), (params, tokens)

    def loss(params, tokens):
        logits = forward(params, tokens)
        return _cross_entropy(logits.reshape(-1, vocab), tokens.reshape(-1))

    return _forward_or_grad(loss, True), (params, tokens)


def build_quantized(layers: int, width: int, batch: int,
                    per_channel: bool) -> tuple[Callable, tuple]:
    """An MLP whose layers quantize activations and weights to int8 (scale by the
    absolute maximum, per tensor or per output channel), multiply in int8 with int32
    accumulation, and dequantize; returns the output."""
    def quantize(x, axis):
        scale = jnp.max(jnp.abs(x), axis=axis, keepdims=True) / 127.0 + 1e-8
        return jnp.clip(jnp.round(x / scale), -127, 127).astype(jnp.int8), scale

    def forward(weights, x):
        for w in weights:
            qx, sx = quantize(x, None)
            qw, sw = quantize(w, 0 if per_channel else None)
            acc = lax.dot_general(qx, qw, (((1,), (0,)), ((), ())),
                                  preferred_element_type=jnp.int32)
            x = jax.nn.gelu(acc.astype(jnp.float32) * sx * sw)
        return x

    return forward, ([sds((width, width)) for _ in range(layers)], sds((batch, width)))


def build_per_example(layers: int, width: int, batch: int,
                      clip: bool) -> tuple[Callable, tuple]:
    """DP-SGD style: ``vmap`` of ``grad`` of an MLP's cross-entropy over examples, each
    gradient optionally clipped to unit global norm, then averaged."""
    sizes = [32] + [width] * layers + [10]
    params = [{"w": sds((a, b)), "b": sds((b,))} for a, b in zip(sizes, sizes[1:])]

    def loss(params, x, y):
        for p in params[:-1]:
            x = jnp.tanh(x @ p["w"] + p["b"])
        logits = x @ params[-1]["w"] + params[-1]["b"]
        return -jax.nn.log_softmax(logits)[y]

    def fn(params, xs, ys):
        grads = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, xs, ys)
        if clip:
            norms = jnp.sqrt(sum(jnp.sum(g.reshape(batch, -1) ** 2, axis=1)
                                 for g in jax.tree_util.tree_leaves(grads)))
            factor = jnp.minimum(1.0, 1.0 / (norms + 1e-6))
            grads = jax.tree_util.tree_map(
                lambda g: g * factor.reshape((batch,) + (1,) * (g.ndim - 1)), grads)
        return jax.tree_util.tree_map(lambda g: jnp.mean(g, axis=0), grads)

    return fn, (params, sds((batch, 32)), sds((batch,), np.int32))


def build_hessian(layers: int, width: int, mode: str) -> tuple[Callable, tuple]:
    """Second derivatives of a small MLP's scalar output in its input: the full
    ``jax.hessian`` (forward over reverse), a Hessian-vector product (``jvp`` of
    ``grad``), or the Jacobian of the gradient by ``jacrev``."""
    sizes = [16] + [width] * layers + [1]
    params = [sds((a, b)) for a, b in zip(sizes, sizes[1:])]

    def f(params, x):
        for w in params[:-1]:
            x = jnp.tanh(x @ w)
        return jnp.sum(x @ params[-1])

    if mode == "hessian":
        def fn(params, x):
            return jax.hessian(f, argnums=1)(params, x)
    elif mode == "hvp":
        def fn(params, x):
            return jax.jvp(lambda x: jax.grad(f, argnums=1)(params, x), (x,), (jnp.ones_like(x),))
    elif mode == "jacrev":
        def fn(params, x):
            return jax.jacrev(jax.grad(f, argnums=1), argnums=1)(params, x)
    else:
        raise ValueError(f"mode must be 'hessian', 'hvp' or 'jacrev', got {mode!r}")
    return fn, (params, sds((16,)))


def build_mobilenet(blocks: int, channels: int, grad: bool, batch: int = 2,
                    image: int = 32) -> tuple[Callable, tuple]:
    """Depthwise-separable blocks (a 3x3 convolution with one group per channel, then a
    1x1 convolution, ReLU6) down to a quarter resolution, then transposed convolutions
    (input-dilated) back up: a small segmentation network; the mean output, or
    ``value_and_grad`` of its square in the parameters."""
    dn = ("NHWC", "HWIO", "NHWC")

    def depthwise(x, w, stride):
        return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=dn,
                                        feature_group_count=channels)

    def pointwise(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)

    def upsample(x, w):
        return lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=dn)

    params = {"stem": sds((3, 3, 3, channels)),
              "blocks": [{"dw": sds((3, 3, 1, channels)), "pw": sds((1, 1, channels, channels))}
                         for _ in range(blocks)],
              "up": [sds((3, 3, channels, channels)) for _ in range(2)],
              "head": sds((1, 1, channels, 4))}

    def forward(params, x):
        h = pointwise(x, params["stem"])
        for i, p in enumerate(params["blocks"]):
            stride = 2 if i < 2 else 1
            h = jnp.clip(pointwise(depthwise(h, p["dw"], stride), p["pw"]), 0.0, 6.0)
        for w in params["up"][: min(2, blocks)]:
            h = jax.nn.relu(upsample(h, w))
        return pointwise(h, params["head"])

    return _forward_or_grad(forward, grad, lambda out: jnp.mean(out * out)), (
        params, sds((batch, image, image, 3)))


def build_resize(ops: int, size: int, method: str) -> tuple[Callable, tuple]:
    """An augmentation pipeline of ``ops`` rounds: ``jax.image.resize`` up by 3/2 with
    ``method``, a centre crop back, a flip, a brightness and contrast change; returns
    the images."""
    def fn(images):
        for i in range(ops):
            big = jax.image.resize(images, (images.shape[0], size * 3 // 2, size * 3 // 2, 3),
                                   method)
            start = size // 4
            images = lax.dynamic_slice(big, (0, start, start, 0), images.shape)
            if i % 2:
                images = images[:, :, ::-1, :]
            mean = jnp.mean(images, axis=(1, 2, 3), keepdims=True)
            images = jnp.clip((images - mean) * 1.1 + mean + 0.05, 0.0, 1.0)
        return images

    return fn, (sds((4, size, size, 3)),)


def build_vae(layers: int, width: int, latent: int, grad: bool,
              batch: int = 32, data: int = 784) -> tuple[Callable, tuple]:
    """A variational autoencoder: an MLP encoder to a Gaussian posterior, a sample drawn
    with ``jax.random.normal`` (reparameterization), an MLP decoder to Bernoulli logits;
    the negative ELBO (``softplus`` reconstruction and analytic KL), or
    ``value_and_grad`` of it in the parameters."""
    def mlp(sizes):
        return [{"w": sds((a, b)), "b": sds((b,))} for a, b in zip(sizes, sizes[1:])]

    params = {"enc": mlp([data] + [width] * layers + [2 * latent]),
              "dec": mlp([latent] + [width] * layers + [data])}

    def apply(layers, h):
        for p in layers[:-1]:
            h = jax.nn.elu(h @ p["w"] + p["b"])
        return h @ layers[-1]["w"] + layers[-1]["b"]

    def loss(params, x, key):
        mean, log_var = jnp.split(apply(params["enc"], x), 2, axis=-1)
        z = mean + jnp.exp(0.5 * log_var) * jax.random.normal(jax.random.wrap_key_data(key),
                                                               mean.shape)
        logits = apply(params["dec"], z)
        recon = jnp.sum(jax.nn.softplus(logits) - x * logits, axis=-1)
        kl = 0.5 * jnp.sum(jnp.exp(log_var) + mean ** 2 - 1.0 - log_var, axis=-1)
        return jnp.mean(recon + kl)

    return _forward_or_grad(loss, grad), (params, sds((batch, data)), sds((2,), np.uint32))


def build_ppo(layers: int, width: int, horizon: int, style: str,
              actions: int = 8, obs: int = 16, envs: int = 8) -> tuple[Callable, tuple]:
    """A PPO update's loss and gradient: generalized advantage estimates by a reverse
    recursion over ``horizon`` steps (a reversed ``lax.scan``, or unrolled), a policy
    and value MLP, categorical log-probabilities, the clipped probability ratio, an
    entropy bonus."""
    check_style(style)
    sizes = [obs] + [width] * layers
    params = {"trunk": [sds((a, b)) for a, b in zip(sizes, sizes[1:])],
              "pi": sds((width, actions)), "v": sds((width, 1))}

    def advantages(rewards, values, done):
        def back(carry, t):
            delta = rewards[t] + 0.99 * values[t + 1] * (1 - done[t]) - values[t]
            carry = delta + 0.99 * 0.95 * (1 - done[t]) * carry
            return carry, carry

        if style == "scan":
            return lax.scan(back, jnp.zeros(envs), jnp.arange(horizon), reverse=True)[1]
        carry, out = jnp.zeros(envs), []
        for t in reversed(range(horizon)):
            carry, adv = back(carry, t)
            out.append(adv)
        return jnp.stack(out[::-1])

    def loss(params, states, acts, old_logp, rewards, done):
        h = states
        for w in params["trunk"]:
            h = jnp.tanh(h @ w)
        logp_all = jax.nn.log_softmax(h @ params["pi"])
        values = (h @ params["v"])[..., 0]
        adv = lax.stop_gradient(advantages(rewards, values, done))
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        logp = jnp.take_along_axis(logp_all[:-1], acts[..., None], axis=-1)[..., 0]
        ratio = jnp.exp(logp - old_logp)
        policy = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv))
        value = jnp.mean((values[:-1] - lax.stop_gradient(adv + values[:-1])) ** 2)
        entropy = -jnp.mean(jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1))
        return policy + 0.5 * value - 0.01 * entropy

    batch = (sds((horizon + 1, envs, obs)), sds((horizon, envs), np.int32),
             sds((horizon, envs)), sds((horizon, envs)), sds((horizon, envs)))
    return _forward_or_grad(loss, True), (params, *batch)


def build_conv3d(blocks: int, channels: int, frames: int,
                 grad: bool, batch: int = 2, size: int = 16) -> tuple[Callable, tuple]:
    """A video / volume network: ``blocks`` 3x3x3 convolutions with group normalization
    and SiLU, every other block strided in space; the mean output, or
    ``value_and_grad`` of its square in the parameters."""
    dn = ("NDHWC", "DHWIO", "NDHWC")
    groups = 4

    def group_norm(h):
        n, d, hh, w, c = h.shape
        g = h.reshape(n, d, hh, w, groups, c // groups)
        mean = jnp.mean(g, axis=(1, 2, 3, 5), keepdims=True)
        var = jnp.var(g, axis=(1, 2, 3, 5), keepdims=True)
        return ((g - mean) * lax.rsqrt(var + 1e-5)).reshape(h.shape)

    def forward(params, x):
        h = x
        for i, w in enumerate(params):
            stride = (1, 2, 2) if i % 2 and h.shape[2] > 2 else (1, 1, 1)
            h = jax.nn.silu(group_norm(lax.conv_general_dilated(h, w, stride, "SAME",
                                                                dimension_numbers=dn)))
        return h

    params = [sds((3, 3, 3, 3 if i == 0 else channels, channels)) for i in range(blocks)]
    return _forward_or_grad(forward, grad, lambda out: jnp.mean(out * out)), (
        params, sds((batch, frames, size, size, 3)))


register(Family(
    name="llama",
    description="LLaMA-style decoder (RMSNorm, rotary embeddings, SwiGLU, causal "
                "attention), logits or value_and_grad of the cross-entropy.",
    build=build_llama,
    grid=param_grid(layers=(1, 2, 3, 4, 6, 8, 12), width=(64, 256), seq=(32, 128),
                    grad=(False, True)),
))

register(Family(
    name="quantized",
    description="int8-quantized MLP layers (round, clip, int8 dot with int32 accumulation).",
    build=build_quantized,
    grid=param_grid(layers=(1, 2, 4, 8, 16, 32, 64), width=(64, 512), batch=(8, 256),
                    per_channel=(False, True)),
))

register(Family(
    name="per_example",
    description="vmap of grad over examples (DP-SGD), with or without per-example clipping.",
    build=build_per_example,
    grid=param_grid(layers=(1, 2, 4, 8, 12, 16, 24), width=(32, 256), batch=(8, 64),
                    clip=(False, True)),
))

register(Family(
    name="hessian",
    description="Hessian, Hessian-vector product or jacrev of grad of an MLP in its input.",
    build=build_hessian,
    grid=param_grid(layers=(1, 2, 4, 8, 12, 16, 24), width=(16, 64, 128),
                    mode=("hessian", "hvp", "jacrev")),
))

register(Family(
    name="mobilenet",
    description="Depthwise-separable conv blocks and transposed-conv upsampling, forward "
                "or value_and_grad.",
    build=build_mobilenet,
    grid=param_grid(blocks=(1, 2, 4, 6, 8, 12, 16), channels=(16, 64), image=(32, 64),
                    grad=(False, True)),
))

register(Family(
    name="resize",
    description="Image augmentation: jax.image.resize, crop, flip, brightness/contrast.",
    build=build_resize,
    grid=param_grid(ops=(1, 2, 4, 8, 16, 32), size=(32, 64, 128), method=("linear", "cubic", "nearest")),
))

register(Family(
    name="vae",
    description="Variational autoencoder (reparameterized normal sample, softplus "
                "reconstruction, KL), negative ELBO or its value_and_grad.",
    build=build_vae,
    grid=param_grid(layers=(1, 2, 3, 4, 6, 8, 12), width=(64, 512), latent=(8, 64),
                    grad=(False, True)),
))

register(Family(
    name="ppo",
    description="PPO loss and gradient: reverse-scan (or unrolled) advantage estimates, "
                "clipped ratio, entropy.",
    build=build_ppo,
    grid=param_grid(layers=(1, 2, 4, 8), width=(32, 256), horizon=(4, 8, 16, 32, 64, 128),
                    style=("unrolled", "scan"),
                    # 128 unrolled steps of the widest 8-layer network took 28 s
                    where=lambda p: (p["horizon"] in (8, 128) if p["style"] == "scan"
                                     else p["horizon"] < 128 or p["layers"] == 1)),
))

register(Family(
    name="conv3d",
    description="3-D convolutions with group norm and SiLU (video / volumes), forward or "
                "value_and_grad.",
    build=build_conv3d,
    grid=param_grid(blocks=(1, 2, 3, 4, 6, 8, 12), channels=(8, 32), frames=(4, 8),
                    grad=(False, True)),
))
