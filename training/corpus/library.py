"""Families written the way public JAX libraries write models: a ResNet with batch norm,
an LSTM, embedding tables and interpolation tables closed over as numpy arrays, an MLP
train step with dropout, per-example expert choice with ``lax.switch``, graph message
passing with ``segment_sum`` and an Adam update (with or without gradient clipping).

Each pairs a construct that one older family alone had (convolution gradients, train
steps of a recurrent cell, embedded constants, PRNG bits, switch branches, tree-wide
optimizer math) with a differently shaped program, so that a model evaluated with one
family held out has still seen the construct. Gathers and scatters are new here: before,
the only ones were a single scatter in half of the eigh programs.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import Family, check_style, param_grid, register, sds

_DN = ("NHWC", "HWIO", "NHWC")


def _forward_or_grad(forward: Callable, grad: bool,
                     loss: Callable = lambda out: out) -> Callable:
    """A fresh function that runs ``forward``, or (``grad``) returns ``value_and_grad`` of
    ``loss(forward(...))`` with respect to its first argument."""
    if not grad:

        def fn(*args):
            return forward(*args)

        return fn

    def fn(first, *rest):
        return jax.value_and_grad(lambda first: loss(forward(first, *rest)))(first)

    return fn


def _cross_entropy(logits, labels):
    """Mean cross-entropy of integer ``labels`` under ``logits`` (batch x classes)."""
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def _batch_norm(h, scale, bias):
    mean = jnp.mean(h, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(h - mean), axis=(0, 1, 2))
    return (h - mean) * lax.rsqrt(var + 1e-5) * scale + bias


def build_resnet(blocks: int, channels: int, image: int, grad: bool,
                 batch: int = 4, classes: int = 10) -> tuple[Callable, tuple]:
    """A stem conv, ``blocks`` residual blocks (two 3x3 convs with batch statistics, the
    second block of each pair strided), global average pooling and a dense head; forward
    logits or ``value_and_grad`` of the cross-entropy."""
    def conv(cin, cout, k=3):
        return {"w": sds((k, k, cin, cout)), "scale": sds((cout,)), "bias": sds((cout,))}

    params = {
        "stem": conv(3, channels),
        "blocks": [{"a": conv(channels, channels), "b": conv(channels, channels)}
                   for _ in range(blocks)],
        "head": sds((channels, classes)),
    }
    strides = [2 if i % 2 == 1 and image >> (i // 2 + 1) >= 4 else 1 for i in range(blocks)]

    def apply_conv(p, h, stride=1):
        h = lax.conv_general_dilated(h, p["w"], (stride, stride), "SAME", dimension_numbers=_DN)
        return _batch_norm(h, p["scale"], p["bias"])

    def forward(params, x):
        h = jax.nn.relu(apply_conv(params["stem"], x))
        for p, stride in zip(params["blocks"], strides, strict=True):
            y = jax.nn.relu(apply_conv(p["a"], h, stride))
            y = apply_conv(p["b"], y)
            skip = h[:, ::stride, ::stride, :] if stride > 1 else h
            h = jax.nn.relu(y + skip)
        return jnp.mean(h, axis=(1, 2)) @ params["head"]

    x_spec, labels = sds((batch, image, image, 3)), sds((batch,), np.int32)
    if not grad:
        return _forward_or_grad(forward, False), (params, x_spec)

    return (_forward_or_grad(lambda params, x, y: _cross_entropy(forward(params, x), y), True),
            (params, x_spec, labels))


def build_lstm(steps: int, hidden: int, style: str, grad: bool,
               batch: int = 8, features: int = 16) -> tuple[Callable, tuple]:
    """An LSTM over a ``steps``-long sequence, as a Python loop ("unrolled") or
    ``lax.scan``; the last hidden state, or ``value_and_grad`` of its squared norm."""
    check_style(style)
    params = {"wx": sds((features, 4 * hidden)), "wh": sds((hidden, 4 * hidden)),
              "b": sds((4 * hidden,))}

    def cell(p, carry, x):
        h, c = carry
        gates = x @ p["wx"] + h @ p["wh"] + p["b"]
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def run(p, xs):
        carry = (jnp.zeros((batch, hidden)), jnp.zeros((batch, hidden)))
        if style == "scan":
            carry, _ = lax.scan(lambda c, x: cell(p, c, x), carry, xs)
        else:
            for t in range(steps):
                carry, _ = cell(p, carry, xs[t])
        return carry[0]

    fn = _forward_or_grad(run, grad, lambda h: jnp.sum(h**2))
    return fn, (params, sds((steps, batch, features)))


def build_lookup(size: int, count: int, mode: str, grad: bool,
                 batch: int = 64) -> tuple[Callable, tuple]:
    """``count`` float32 numpy tables of ``size`` elements closed over by the function.

    Args:
        mode: "embed" (each a (size/64, 64) embedding matrix read with ``jnp.take`` at
            integer ids, summed and fed to a dense layer) or "interp" (each a sorted grid
            and its values for ``jnp.interp`` of the input, as in a tabulated physics
            model).
        grad: ``value_and_grad`` with respect to the dense weights (embed) or the input
            (interp).
    """
    if mode not in ("embed", "interp"):
        raise ValueError(f"mode must be 'embed' or 'interp', got {mode!r}")
    rng = np.random.default_rng(size * 31 + count)
    if mode == "embed":
        rows = max(size // 64, 1)
        tables = [rng.standard_normal((rows, 64)).astype(np.float32) for _ in range(count)]

        def forward(w, ids):
            h = sum(jnp.take(t, ids % rows, axis=0) for t in tables)
            return jnp.sum(jnp.tanh(h @ w) ** 2)

        args = (sds((64, 64)), sds((batch,), np.int32))
    else:
        grids = [np.sort(rng.uniform(-3, 3, size)).astype(np.float32) for _ in range(count)]
        values = [rng.standard_normal(size).astype(np.float32) for _ in range(count)]

        def forward(x):
            return jnp.sum(sum(jnp.interp(x, g, v) for g, v in zip(grids, values, strict=True)))

        args = (sds((batch,)),)
    return _forward_or_grad(forward, grad), args


def build_dropout_mlp(depth: int, width: int, impl: str, grad: bool,
                      batch: int = 32, rate: float = 0.1) -> tuple[Callable, tuple]:
    """An MLP with dropout after every layer, its masks drawn from a key split per layer
    (a training forward pass, or ``value_and_grad`` of an MSE loss)."""
    if impl not in ("threefry2x32", "rbg"):
        raise ValueError(f"impl must be 'threefry2x32' or 'rbg', got {impl!r}")
    ws = [sds((width, width)) for _ in range(depth)]
    words = 2 if impl == "threefry2x32" else 4

    def forward(ws, x, key_data):
        key = jax.random.wrap_key_data(key_data, impl=impl)
        for w in ws:
            key, sub = jax.random.split(key)
            x = jax.nn.relu(x @ w)
            keep = jax.random.bernoulli(sub, 1.0 - rate, x.shape)
            x = jnp.where(keep, x / (1.0 - rate), 0.0)
        return x

    fn = _forward_or_grad(forward, grad, lambda out: jnp.mean(out**2))
    return fn, (ws, sds((batch, width)), sds((words,), np.uint32))


def build_experts(branches: int, width: int, mode: str, grad: bool,
                  batch: int = 16, steps: int = 8) -> tuple[Callable, tuple]:
    """``lax.switch`` among ``branches`` two-layer experts.

    Args:
        mode: "vmap" (each example picks its expert: under ``vmap`` every branch runs and
            a select keeps one) or "scan" (a ``steps``-long scan whose body switches on
            the step's expert id: a case inside a loop).
    """
    if mode not in ("vmap", "scan"):
        raise ValueError(f"mode must be 'vmap' or 'scan', got {mode!r}")
    params = [{"w1": sds((width, width)), "w2": sds((width, width))} for _ in range(branches)]
    acts = (jnp.tanh, jax.nn.gelu, jax.nn.relu, jnp.sin)

    def expert(b: int) -> Callable:
        def apply(params, x):
            return acts[b % len(acts)](x @ params[b]["w1"]) @ params[b]["w2"]
        return apply

    experts = [expert(b) for b in range(branches)]

    if mode == "vmap":

        def forward(params, ids, x):
            return jax.vmap(lambda i, x: lax.switch(i, experts, params, x))(ids, x)

        ids, x = sds((batch,), np.int32), sds((batch, width))
    else:

        def forward(params, ids, x):
            def step(h, i):
                return lax.switch(i, experts, params, h), None

            return lax.scan(step, x, ids)[0]

        ids, x = sds((steps,), np.int32), sds((batch, width))
    return _forward_or_grad(forward, grad, lambda out: jnp.sum(out**2)), (params, ids, x)


def build_gnn(layers: int, nodes: int, aggregate: str, grad: bool,
              width: int = 32, degree: int = 4) -> tuple[Callable, tuple]:
    """Message passing over ``nodes * degree`` edges: gather the sender features, a dense
    message layer, ``segment_sum`` or ``segment_max`` into the receivers, a node update;
    ``layers`` rounds, then a graph readout (or ``value_and_grad`` of it)."""
    segment = {"sum": jax.ops.segment_sum, "max": jax.ops.segment_max}
    if aggregate not in segment:
        raise ValueError(f"aggregate must be 'sum' or 'max', got {aggregate!r}")
    reduce = segment[aggregate]
    edges = nodes * degree
    params = [{"msg": sds((2 * width, width)), "upd": sds((2 * width, width))}
              for _ in range(layers)]

    def forward(params, h, senders, receivers):
        for p in params:
            pair = jnp.concatenate([h[senders], h[receivers]], axis=-1)
            messages = jax.nn.relu(pair @ p["msg"])
            incoming = reduce(messages, receivers, num_segments=nodes)
            h = h + jnp.tanh(jnp.concatenate([h, incoming], axis=-1) @ p["upd"])
        return jnp.sum(jnp.mean(h, axis=0) ** 2)

    args = (params, sds((nodes, width)), sds((edges,), np.int32), sds((edges,), np.int32))
    return _forward_or_grad(forward, grad), args


def build_adam(layers: int, width: int, clip: bool, batch: int = 32) -> tuple[Callable, tuple]:
    """One training step of an MLP with an Adam update written out per leaf (moments,
    bias correction), optionally after clipping the gradient's global norm."""
    params = [{"w": sds((width, width)), "b": sds((width,))} for _ in range(layers)]
    tree_map = jax.tree_util.tree_map

    def loss(params, x):
        for p in params:
            x = jnp.tanh(x @ p["w"] + p["b"])
        return jnp.mean(x**2)

    def fn(params, mu, nu, step, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        if clip:
            norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
            grads = tree_map(lambda g: g * jnp.minimum(1.0, 1.0 / (norm + 1e-6)), grads)
        mu = tree_map(lambda m, g: 0.9 * m + 0.1 * g, mu, grads)
        nu = tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, nu, grads)
        t = step + 1.0
        update = tree_map(lambda m, v: (m / (1 - 0.9**t)) / (jnp.sqrt(v / (1 - 0.999**t)) + 1e-8),
                          mu, nu)
        params = tree_map(lambda p, u: p - 1e-3 * u, params, update)
        return value, params, mu, nu

    return fn, (params, params, params, sds(()), sds((batch, width)))


register(Family(
    name="resnet",
    description="ResNet blocks with batch statistics (Flax-style), forward or value_and_grad "
                "of a cross-entropy.",
    build=build_resnet,
    grid=param_grid(blocks=(1, 2, 3, 4, 6, 8, 12, 16), channels=(8, 32), image=(16, 32),
                    grad=(False, True)),
))

register(Family(
    name="lstm",
    description="LSTM over a sequence, unrolled in Python or as lax.scan, forward or "
                "value_and_grad.",
    build=build_lstm,
    grid=param_grid(steps=(2, 4, 8, 16, 32, 64, 128), hidden=(32, 128), style=("unrolled", "scan"),
                    grad=(False, True)),
))

register(Family(
    name="lookup_table",
    description="Embedding and interpolation tables closed over as numpy arrays (gather, "
                "searchsorted), forward or value_and_grad.",
    build=build_lookup,
    grid=param_grid(size=(1024, 16384, 262144, 1048576, 4194304), count=(1, 2, 4, 8),
                    mode=("embed", "interp"), grad=(False, True),
                    where=lambda p: p["size"] * p["count"] <= 4 * 1048576),
))

register(Family(
    name="dropout_mlp",
    description="MLP with dropout masks from a key split per layer, forward or value_and_grad.",
    build=build_dropout_mlp,
    grid=param_grid(depth=(1, 2, 3, 4, 8, 16, 32), width=(64, 256), impl=("threefry2x32", "rbg"),
                    grad=(False, True)),
))

register(Family(
    name="experts",
    description="lax.switch among two-layer experts, per example under vmap or per step "
                "inside a scan, forward or value_and_grad.",
    build=build_experts,
    grid=param_grid(branches=(2, 3, 4, 8, 16, 32, 64), width=(16, 128), mode=("vmap", "scan"),
                    grad=(False, True)),
))

register(Family(
    name="gnn",
    description="Graph message passing: gather senders, dense messages, segment_sum/max into "
                "receivers; forward or value_and_grad.",
    build=build_gnn,
    grid=param_grid(layers=(1, 2, 4, 8, 16), nodes=(64, 256, 1024), aggregate=("sum", "max"),
                    grad=(False, True)),
))

register(Family(
    name="adam",
    description="MLP training step with an Adam update per leaf (Optax-style), with or "
                "without global-norm clipping.",
    build=build_adam,
    grid=param_grid(layers=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64), width=(16, 128, 512), clip=(False, True)),
))
