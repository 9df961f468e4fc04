"""Dtype families: complex64 FFT/matmul chains and float64 (x64) chains."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .registry import Family, param_grid, register, sds

_COMPLEX_KINDS = ("fft", "matmul", "mixed")


def build_complex(stages: int, n: int, kind: str) -> tuple[Callable, tuple]:
    """A chain of complex64 stages on a (16, n) signal.

    Args:
        stages: Number of stages.
        n: Signal length (FFT size, or the side of the square complex weights).
        kind: "fft" (fft, phase multiply, ifft), "matmul" (complex matmul and a
            magnitude squash) or "mixed" (alternating).
    """
    if kind not in _COMPLEX_KINDS:
        raise ValueError(f"kind must be one of {_COMPLEX_KINDS}, got {kind!r}")
    kinds = [
        ("fft" if i % 2 == 0 else "matmul") if kind == "mixed" else kind for i in range(stages)
    ]
    n_mat = kinds.count("matmul")
    ramp = np.arange(n, dtype=np.float32) / n
    phases = [np.exp(2j * np.pi * (s + 1) * ramp).astype(np.complex64) for s in range(stages)]

    def fn(x, ws):
        w_iter = iter(ws)
        for k, phase in zip(kinds, phases, strict=True):
            if k == "fft":
                x = jnp.fft.ifft(jnp.fft.fft(x) * phase)
            else:
                x = x @ next(w_iter)
                x = x / (1.0 + jnp.abs(x))
        return x

    return fn, (sds((16, n), np.complex64), [sds((n, n), np.complex64) for _ in range(n_mat)])


def build_float64(stages: int, width: int, kind: str, grad: bool) -> tuple[Callable, tuple]:
    """A chain of float64 stages; ``kind`` "matmul" (affine+tanh) or "transcendental"."""
    if kind not in ("matmul", "transcendental"):
        raise ValueError(f"kind must be 'matmul' or 'transcendental', got {kind!r}")
    ws = [sds((width, width), np.float64) for _ in range(stages if kind == "matmul" else 0)]

    def forward(ws, x):
        if kind == "matmul":
            for w in ws:
                x = jnp.tanh(x @ w + 0.1)
            return x
        for _ in range(stages):
            x = jnp.exp(-(x**2)) * jnp.sin(3.0 * x) + jnp.log1p(jnp.abs(x)) + jnp.arctan(x)
        return x

    x_spec = sds((16, width), np.float64)
    if not grad:

        def fn(ws, x):
            return forward(ws, x)

    else:

        def fn(ws, x):
            return jax.value_and_grad(lambda ws, x: jnp.sum(forward(ws, x) ** 2), argnums=(0, 1))(
                ws, x
            )

    return fn, (ws, x_spec)


register(
    Family(
        name="complex64",
        description="complex64 chains of FFT round trips and/or complex matmuls.",
        build=build_complex,
        grid=param_grid(stages=(1, 2, 4, 8, 16, 32), n=(16, 128, 1024), kind=_COMPLEX_KINDS),
    )
)

register(
    Family(
        name="float64",
        description="float64 chains (affine+tanh or transcendental), forward or value_and_grad.",
        build=build_float64,
        grid=param_grid(
            stages=(1, 2, 4, 8, 16, 32, 64),
            width=(16, 256),
            kind=("matmul", "transcendental"),
            grad=(False, True),
            # The grad of an all-elementwise chain fuses into huge fusions: transcendental
            # grad 16 stages ~7 s, 64 stages took 204 s, so it stops at 16 (and one tail
            # point at 32: 45-67 s wall / 22 s CPU loaded). Everything else stays under ~0.6 s.
            where=lambda p: p["kind"] == "matmul" or not p["grad"] or p["stages"] <= 16,
        )
        + ({"stages": 32, "width": 16, "kind": "transcendental", "grad": True},),
        x64=True,
    )
)
