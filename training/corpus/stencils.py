"""Thin convolutions: finite-difference stencils on one-channel fields (as jaxdf's
operators convolve them) and depthwise blurs of RGB images. Each carries few
multiply-adds for its size, and the TPU compiler can spend seconds on one: deviceless for
v5e, a one-channel 3x3 convolution of a 256x256 field in NCHW compiled in about 6 s, a
7x7 one in 34 s, the same 3x3 in NHWC in 1.7 s and a 64-channel 3x3 in 0.75 s, at a
fixed op count.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax import lax

from .registry import Family, param_grid, register, sds

STEPS = 10  # time steps of a stencil's loop: its body compiles once


def build_stencil(kind: str, n: int, convs: int, window: int) -> tuple[Callable, tuple]:
    """``kind`` "fd": a one-channel (n, n) field (NCHW) stepped ``STEPS`` times in a
    ``fori_loop``, each step adding ``convs`` derivative stencils of ``window`` points
    along alternating axes; "laplacian": the same with ``window`` x ``window`` stencils;
    "depthwise": ``convs`` depthwise ``window`` x ``window`` convolutions (one group per
    channel) of a (1, n, n, 3) image with GELU between."""
    if kind in ("fd", "laplacian"):
        def shape(i: int) -> tuple:
            if kind == "laplacian":
                return (1, 1, window, window)
            return (1, 1, window, 1) if i % 2 == 0 else (1, 1, 1, window)
        kernels = tuple(sds(shape(i)) for i in range(convs))

        def fn(field, kernels, dt):
            def step(_, u):
                flux = sum(lax.conv_general_dilated(u, k, (1, 1), "SAME") for k in kernels)
                return u + dt * flux
            return lax.fori_loop(0, STEPS, step, field)
        return fn, (sds((1, 1, n, n)), kernels, sds(()))
    if kind != "depthwise":
        raise ValueError(f"kind must be 'fd', 'laplacian' or 'depthwise', got {kind!r}")

    channels = 3  # an RGB image, as augmentation pipelines blur it
    dn = ("NHWC", "HWIO", "NHWC")

    def forward(kernels, x):
        for k in kernels:
            x = jax.nn.gelu(lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=dn,
                                                     feature_group_count=channels))
        return x
    return forward, (tuple(sds((window, window, 1, channels)) for _ in range(convs)),
                     sds((1, n, n, channels)))


register(Family(
    name="thin_conv",
    description="Finite-difference stencils on one-channel fields and depthwise blurs of "
                "RGB images: windows of 3 to 7, fields of 64 and 256.",
    build=build_stencil,
    grid=param_grid(kind=("fd", "laplacian", "depthwise"), n=(64, 256), convs=(1, 4),
                    window=(3, 5, 7),
                    # a 7x7 one-channel stencil alone compiles for about 35 s deviceless
                    where=lambda p: not (p["kind"] == "laplacian" and p["window"] == 7)),
))
