"""Dense network families: MLP and transformer blocks (layers unrolled in Python)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .registry import Family, param_grid, register, sds


def _sgd(params, grads, lr: float = 1e-3):
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def build_mlp(depth: int, width: int, batch: int, grad: bool) -> tuple[Callable, tuple]:
    """``depth`` dense+gelu layers of ``width``; forward pass or value_and_grad of an MSE."""
    params = [{"w": sds((width, width)), "b": sds((width,))} for _ in range(depth)]
    x, y = sds((batch, width)), sds((batch, width))

    def forward(params, x):
        for i, layer in enumerate(params):
            x = x @ layer["w"] + layer["b"]
            if i < len(params) - 1:
                x = jax.nn.gelu(x)
        return x

    if not grad:

        def fn(params, x):
            return forward(params, x)

        return fn, (params, x)

    def fn(params, x, y):
        return jax.value_and_grad(lambda p: jnp.mean((forward(p, x) - y) ** 2))(params)

    return fn, (params, x, y)


def _layer_norm(x, p):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]


def build_transformer(
    layers: int, width: int, seq: int, mode: str, batch: int = 2
) -> tuple[Callable, tuple]:
    """Pre-LN causal transformer; ``mode`` is "forward" or "train" (value_and_grad + SGD)."""
    if mode not in ("forward", "train"):
        raise ValueError(f"mode must be 'forward' or 'train', got {mode!r}")
    heads = max(1, width // 64)
    head_dim = width // heads

    def ln_params():
        return {"scale": sds((width,)), "bias": sds((width,))}

    params = {
        "blocks": [
            {
                "ln1": ln_params(),
                "wqkv": sds((width, 3 * width)),
                "wo": sds((width, width)),
                "ln2": ln_params(),
                "w1": sds((width, 4 * width)),
                "b1": sds((4 * width,)),
                "w2": sds((4 * width, width)),
                "b2": sds((width,)),
            }
            for _ in range(layers)
        ],
        "ln_f": ln_params(),
    }
    x_spec, y_spec = sds((batch, seq, width)), sds((batch, seq, width))
    mask = np.tril(np.ones((seq, seq), dtype=bool))
    scale = np.float32(1.0 / np.sqrt(head_dim))

    def attention(h, p):
        qkv = (h @ p["wqkv"]).reshape(batch, seq, 3, heads, head_dim)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
        logits = jnp.where(mask, logits, -1e9)
        att = jax.nn.softmax(logits, axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(batch, seq, width)
        return out @ p["wo"]

    def forward(params, x):
        for p in params["blocks"]:
            x = x + attention(_layer_norm(x, p["ln1"]), p)
            h = _layer_norm(x, p["ln2"])
            x = x + jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
        return _layer_norm(x, params["ln_f"])

    if mode == "forward":

        def fn(params, x):
            return forward(params, x)

        return fn, (params, x_spec)

    def fn(params, x, y):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((forward(p, x) - y) ** 2))(params)
        return loss, _sgd(params, grads)

    return fn, (params, x_spec, y_spec)


register(
    Family(
        name="mlp",
        description="Dense MLP (unrolled layers), forward or value_and_grad of an MSE loss.",
        build=build_mlp,
        # Largest: depth=64 grad ~0.5-3.5 s (small batches compile slowest).
        grid=param_grid(
            depth=(1, 2, 4, 8, 16, 32, 64),
            width=(32, 256, 2048),
            batch=(1, 64),
            grad=(False, True),
        ),
    )
)


def _transformer_point_kept(p: dict) -> bool:
    """Width 64/512 up to 64 layers forward and 8 train; two 16-layer train steps."""
    if p["mode"] == "forward" or p["layers"] <= 8:
        return p["width"] != 256
    return p["layers"] == 16 and p["seq"] == 128 and p["width"] != 256


register(
    Family(
        name="transformer",
        description="Causal pre-LN transformer blocks, forward pass or SGD train step.",
        build=build_transformer,
        # Train steps cost far more than forward passes: train layers=1 ~2 s, 8 ~9 s,
        # 16 ~12 s quiet (42 s wall / 21 s CPU on a loaded machine); 32 took 193 s wall /
        # 103 s CPU loaded, so it is left out. Forward: layers=64 ~2.5 s.
        grid=param_grid(
            layers=(1, 2, 4, 8, 16, 32, 64),
            width=(64, 256, 512),
            seq=(16, 128, 512),
            mode=("forward", "train"),
            where=_transformer_point_kept,
        ),
    )
)
