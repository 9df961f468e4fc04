"""Dtype families: complex64 FFT/matmul chains, complex64 recurrences and float64 (x64)
chains."""

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


def build_complex_recurrence(steps: int, width: int, kind: str, grad: bool
                             ) -> tuple[Callable, tuple]:
    """A complex64 recurrence unrolled over `steps` inputs of `width` (a linear recurrent
    unit's step, a circuit's phase gates).

    200 unrolled steps of `h = a h + exp(a) x_t; h / (1 + |h|)` on (64,) compiled in 8.7 s
    as complex64 and 0.3 s as float32 (jax 0.10.2, AMD EPYC), which the schema-17 model
    predicted alike (0.34 s). Measured (36 programs, 0.06-50 s,
    `bench/data/cpu_complex_recurrence.parquet`), what is slow is one fusion of many complex
    elementwise ops: the forward elementwise chains (a fusion of 500-2000 ops) were
    under-predicted 5-65x, while the layered kind (fusions of 9 ops) and the gradients were
    predicted within 0.4-2.9x, median 0.95. Trained on, the rows made the stored benches
    worse (`bench/results/added_rows_complex.json`) and did not help the complex programs of
    a real library (PennyLane's VQE, under-predicted 1.7x), so they are not in the shipped
    data. Weighing complex ops more would not fix it (`bench/archive/complex_op_cost.py`): the
    emulator's weights are near what the ops cost. Few training rows are one giant fusion
    in an otherwise small module (6 rows of 2 families), and 16 wide compiles 2-5x faster
    than 256 wide with the same features, which no simple rule of width explains
    (`bench/archive/complex_width.py`).

    Args:
        steps: Unrolled steps.
        width: Length of the state.
        kind: "elementwise" (the step above: one long chain XLA fuses) or "layered"
            (a phase rotation, then a complex matmul mixing the state, each step).
        grad: Differentiate the state's squared magnitude (with respect to the inputs).
    """
    if kind not in ("elementwise", "layered"):
        raise ValueError(f"kind must be 'elementwise' or 'layered', got {kind!r}")

    def forward(a, xs, mix):
        h = jnp.zeros_like(xs[0])
        for t in range(steps):
            if kind == "elementwise":
                h = a * h + jnp.exp(a) * xs[t]
                h = h / (1.0 + jnp.abs(h))
            else:
                h = (h * jnp.exp(1j * jnp.real(xs[t])) + xs[t]) @ mix
        return jnp.sum(jnp.abs(h) ** 2)

    fn = jax.grad(forward, argnums=(0, 1)) if grad else forward
    return fn, (sds((width,), np.complex64), sds((steps, width), np.complex64),
                sds((width, width), np.complex64))


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
        name="complex_recurrence",
        description="complex64 recurrences unrolled: elementwise chains or phase rotations "
                    "mixed by complex matmuls, forward or grad (measured, not in the "
                    "shipped data).",
        build=build_complex_recurrence,
        grid=param_grid(steps=(4, 16, 64, 128, 256), width=(16, 256),
                        kind=("elementwise", "layered"), grad=(False, True)),
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
