"""Four more families in the style of public JAX code: a WaveNet (1-D dilated convolutions,
channels last or channels first), a vision transformer (a strided patch convolution and
Flax-style attention einsums), power iteration on a ``jax.experimental.sparse`` BCOO
matrix, and beam-search decoding with ``lax.top_k``.

Each overlaps an older family in a construct whose compile cost is its own: convolutions
not in the layout XLA:CPU hands to its library (channels-first input, an OIH kernel, and
every convolution gradient) cost a transposing loop kernel each (`bench/archive/layout_cost.py`:
a 1-D NCW convolution compiled in 94 ms against 11 ms for NWC); so do attention einsums
whose batch dimensions are not leading (``bqhd,bkhd->bhqk``: 86 ms against 11 ms for
``bhqd,bhkd->bhqk``); gathers and scatters with bounds-checking index arithmetic
(BCOO); integer index arithmetic on top-k results (beam search).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import sparse

from .library import _cross_entropy, _forward_or_grad
from .registry import Family, check_style, param_grid, register, sds

# 1-D convolution dimension numbers per activation layout
_CONV1D = {"NWC": ("NHC", "HIO", "NHC"), "NCW": ("NCH", "OIH", "NCH")}


def build_wavenet(layers: int, channels: int, layout: str, grad: bool,
                  batch: int = 4, length: int = 256) -> tuple[Callable, tuple]:
    """Gated dilated causal convolutions (kernel 2, dilation 1, 2, 4, ... 128, repeating)
    with residual and skip 1x1 convolutions, in ``layout`` "NWC" (channels last) or "NCW"
    (channels first, as code ported from PyTorch writes it); the mean skip output, or
    ``value_and_grad`` of its square."""
    if layout not in _CONV1D:
        raise ValueError(f"layout must be one of {sorted(_CONV1D)}, got {layout!r}")
    dn = _CONV1D[layout]
    feature_axis = dn[0].index("C")

    def kernel(cin: int, cout: int, width: int):
        return sds((width, cin, cout) if layout == "NWC" else (cout, cin, width))

    params = {
        "in": kernel(1, channels, 1),
        "layers": [{"dilated": kernel(channels, 2 * channels, 2),
                    "res": kernel(channels, channels, 1),
                    "skip": kernel(channels, channels, 1)} for _ in range(layers)],
    }

    def conv(h, w, dilation=0):
        """A 1x1 convolution, or (``dilation``) a causal one of kernel width 2."""
        return lax.conv_general_dilated(h, w, (1,), [(dilation, 0)],
                                        rhs_dilation=(max(dilation, 1),), dimension_numbers=dn)

    def forward(params, x):
        h = conv(x, params["in"])
        skip = jnp.zeros_like(h)
        for i, p in enumerate(params["layers"]):
            z = conv(h, p["dilated"], 2 ** (i % 8))
            a, b = jnp.split(z, 2, axis=feature_axis)
            gated = jnp.tanh(a) * jax.nn.sigmoid(b)
            h = h + conv(gated, p["res"])
            skip = skip + conv(gated, p["skip"])
        return jnp.mean(jax.nn.relu(skip))

    x = sds((batch, length, 1) if layout == "NWC" else (batch, 1, length))
    return _forward_or_grad(forward, grad, jnp.square), (params, x)


def build_vit(depth: int, width: int, patch: int, grad: bool, batch: int = 4,
              image: int = 32, classes: int = 10, head_dim: int = 32) -> tuple[Callable, tuple]:
    """Patch embedding (a convolution with stride ``patch``), ``depth`` pre-norm blocks of
    multi-head attention written as Flax writes it (``bqhd,bkhd->bhqk``) and a GELU MLP,
    mean pooling and a dense head; forward logits or ``value_and_grad`` of the
    cross-entropy."""
    heads = width // head_dim
    tokens = (image // patch) ** 2

    def block():
        return {"ln1": sds((width,)), "ln2": sds((width,)),
                "qkv": sds((3, width, heads, head_dim)), "out": sds((heads, head_dim, width)),
                "up": sds((width, 4 * width)), "down": sds((4 * width, width))}

    params = {"patch": sds((patch, patch, 3, width)), "pos": sds((tokens, width)),
              "blocks": [block() for _ in range(depth)], "head": sds((width, classes))}

    def norm(x, scale):
        x = x - jnp.mean(x, axis=-1, keepdims=True)
        return x * lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + 1e-6) * scale

    def attention(p, x):
        q, k, v = (jnp.einsum("btd,dhk->bthk", x, p["qkv"][i]) for i in range(3))
        weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(head_dim))
        return jnp.einsum("bqhd,hdo->bqo", jnp.einsum("bhqk,bkhd->bqhd", weights, v), p["out"])

    def forward(params, x):
        h = lax.conv_general_dilated(x, params["patch"], (patch, patch), "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = h.reshape(batch, tokens, width) + params["pos"]
        for p in params["blocks"]:
            h = h + attention(p, norm(h, p["ln1"]))
            h = h + jax.nn.gelu(norm(h, p["ln2"]) @ p["up"]) @ p["down"]
        return jnp.mean(h, axis=1) @ params["head"]

    x = sds((batch, image, image, 3))
    if not grad:
        return _forward_or_grad(forward, False), (params, x)
    return (_forward_or_grad(lambda params, x, y: _cross_entropy(forward(params, x), y), True),
            (params, x, sds((batch,), np.int32)))


def build_bcoo_power(n: int, nnz_per_row: int, matvecs: int,
                     grad: bool) -> tuple[Callable, tuple]:
    """``matvecs`` unrolled power-iteration steps with a BCOO sparse matrix
    (``jax.experimental.sparse``: gathers, a scatter-add and index bounds checks per
    product); the Rayleigh quotient, or ``value_and_grad`` of it with respect to the
    matrix's stored values."""
    nnz = n * nnz_per_row

    def forward(data, indices, x):
        matrix = sparse.BCOO((data, indices), shape=(n, n))
        for _ in range(matvecs):
            x = matrix @ x
            x = x / jnp.linalg.norm(x)
        return x @ (matrix @ x)

    args = (sds((nnz,)), sds((nnz, 2), np.int32), sds((n,)))
    return _forward_or_grad(forward, grad), args


def build_beam_search(steps: int, beam: int, vocab: int, style: str, batch: int = 2,
                      hidden: int = 64) -> tuple[Callable, tuple]:
    """Beam-search decoding of a recurrent language model for ``steps`` tokens, as a
    Python loop ("unrolled") or ``lax.scan``: ``lax.top_k`` over beam x vocab scores,
    parent beams and tokens by integer division and remainder, hidden states gathered by
    parent, token embeddings gathered by id; returns the token array and scores."""
    check_style(style)
    params = {"embed": sds((vocab, hidden)), "w": sds((hidden, hidden)),
              "out": sds((hidden, vocab))}

    def step(params, state, t):
        tokens, scores, h = state
        logp = jax.nn.log_softmax(h @ params["out"])
        total = (scores[..., None] + logp).reshape(batch, beam * vocab)
        scores, flat = lax.top_k(total, beam)
        parent, token = flat // vocab, flat % vocab
        h = jnp.take_along_axis(h, parent[..., None], axis=1)
        h = jnp.tanh(h @ params["w"] + params["embed"][token])
        tokens = jnp.take_along_axis(tokens, parent[..., None], axis=1)
        tokens = lax.dynamic_update_slice_in_dim(tokens, token[..., None], t, axis=2)
        return tokens, scores, h

    def decode(params, h0):
        state = (jnp.zeros((batch, beam, steps), jnp.int32), jnp.zeros((batch, beam)),
                 jnp.broadcast_to(h0[:, None, :], (batch, beam, hidden)))
        if style == "scan":
            state, _ = lax.scan(lambda s, t: (step(params, s, t), None), state,
                                jnp.arange(steps))
        else:
            for t in range(steps):
                state = step(params, state, t)
        return state[0], state[1]

    return decode, (params, sds((batch, hidden)))


register(Family(
    name="wavenet",
    description="WaveNet-style gated dilated 1-D convolutions, channels last or first, "
                "forward or value_and_grad.",
    build=build_wavenet,
    grid=param_grid(layers=(1, 2, 4, 8, 12, 16, 24), channels=(16, 64), layout=("NWC", "NCW"),
                    grad=(False, True)),
))

register(Family(
    name="vit",
    description="Vision transformer: patch convolution, Flax-style attention einsums, GELU "
                "MLP; forward or value_and_grad of a cross-entropy.",
    build=build_vit,
    grid=param_grid(depth=(1, 2, 3, 4, 6, 8, 12), width=(64, 192), patch=(4, 8),
                    grad=(False, True)),
))

register(Family(
    name="bcoo_power",
    description="Power iteration on a jax.experimental.sparse BCOO matrix (gather, "
                "scatter-add), forward or value_and_grad in the stored values.",
    build=build_bcoo_power,
    grid=param_grid(n=(256, 4096), nnz_per_row=(4, 16), matvecs=(1, 2, 4, 8, 16, 32, 64),
                    grad=(False, True)),
))

register(Family(
    name="beam_search",
    description="Beam-search decoding with lax.top_k, unrolled or as lax.scan.",
    build=build_beam_search,
    grid=param_grid(steps=(2, 4, 8, 12, 16, 32, 64), beam=(4, 16), vocab=(512, 8192),
                    style=("unrolled", "scan")),
))
