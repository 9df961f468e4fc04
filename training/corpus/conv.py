"""Convolutional families: an encoder-decoder CNN with strided convs and conv_transpose."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from .registry import Family, param_grid, register, sds

_DN = ("NHWC", "HWIO", "NHWC")


def build_cnn(
    depth: int, channels: int, image: int, grad: bool, batch: int = 4
) -> tuple[Callable, tuple]:
    """Autoencoder: ``depth`` 3x3 convs (every second one strided) then conv_transposes.

    Each stride-2 conv is undone by one stride-2 ``lax.conv_transpose``; with no
    downsampling a single stride-1 conv_transpose is used, so the op is always present.
    """
    in_ch = 3
    strides = []
    size = image
    for i in range(depth):
        down = i % 2 == 1 and size >= 8
        strides.append(2 if down else 1)
        size //= 2 if down else 1
    n_up = max(1, strides.count(2))
    up_stride = 2 if strides.count(2) else 1

    params = {
        "enc": [
            {"k": sds((3, 3, in_ch if i == 0 else channels, channels)), "b": sds((channels,))}
            for i in range(depth)
        ],
        "dec": [{"k": sds((3, 3, channels, channels)), "b": sds((channels,))} for _ in range(n_up)],
        "head": sds((1, 1, channels, in_ch)),
    }
    x_spec = sds((batch, image, image, in_ch))

    def forward(params, x):
        h = x
        for p, s in zip(params["enc"], strides, strict=True):
            h = jax.lax.conv_general_dilated(h, p["k"], (s, s), "SAME", dimension_numbers=_DN)
            h = jax.nn.relu(h + p["b"])
        for p in params["dec"]:
            h = jax.lax.conv_transpose(
                h, p["k"], (up_stride, up_stride), "SAME", dimension_numbers=_DN
            )
            h = jax.nn.relu(h + p["b"])
        return jax.lax.conv_general_dilated(
            h, params["head"], (1, 1), "SAME", dimension_numbers=_DN
        )

    if not grad:

        def fn(params, x):
            return forward(params, x)

        return fn, (params, x_spec)

    def fn(params, x):
        return jax.value_and_grad(lambda p: jnp.mean((forward(p, x) - x) ** 2))(params)

    return fn, (params, x_spec)


register(
    Family(
        name="cnn",
        description="Conv encoder (strided) + conv_transpose decoder, forward or value_and_grad.",
        build=build_cnn,
        # Largest: depth=16, channels=64, image=64, grad -> expected ~3 s CPU compile.
        grid=param_grid(
            depth=(1, 2, 4, 8, 16),
            channels=(8, 32, 64),
            image=(16, 32, 64),
            grad=(False, True),
        ),
    )
)
