"""Loop families: unrolled vs scan vs fori_loop, grad of scan, nested scans, an RK4 ODE
integrator, and the scan-backward user report (seed)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import Family, check_style, param_grid, register, sds

LOOP_STYLES = ("unrolled", "scan", "fori")


def _stages(x, ws):
    for w in ws:
        x = jnp.tanh(x @ w)
    return x


def build_loop(
    style: str, steps: int, body: int, width: int, unroll: int = 1
) -> tuple[Callable, tuple]:
    """The same step (``body`` matmul+tanh stages) repeated ``steps`` times.

    Args:
        style: "unrolled" (Python for loop), "scan" (``lax.scan``) or "fori"
            (``lax.fori_loop``).
        steps: Trip count.
        body: Stages per step.
        width: Width of the carried vector and square weights.
        unroll: ``lax.scan`` unroll factor (only used by style "scan").
    """
    if style not in LOOP_STYLES:
        raise ValueError(f"style must be one of {LOOP_STYLES}, got {style!r}")
    ws = [sds((width, width)) for _ in range(body)]
    x_spec = sds((8, width))

    if style == "unrolled":

        def fn(ws, x):
            for _ in range(steps):
                x = _stages(x, ws)
            return x

    elif style == "scan":

        def fn(ws, x):
            x, _ = lax.scan(
                lambda c, _: (_stages(c, ws), None), x, None, length=steps, unroll=unroll
            )
            return x

    else:

        def fn(ws, x):
            return lax.fori_loop(0, steps, lambda i, c: _stages(c, ws), x)

    return fn, (ws, x_spec)


def build_scan_grad(length: int, body: int, width: int, unroll: int) -> tuple[Callable, tuple]:
    """value_and_grad (w.r.t. weights and initial carry) of a scan over ``length`` inputs."""
    ws = [sds((width, width)) for _ in range(body)]
    x0, xs = sds((width,)), sds((length, width))

    def loss(ws, x0, xs):
        def step(c, x):
            for w in ws:
                c = jnp.tanh(c @ w + x)
            return c, jnp.sum(c * c)

        c, ys = lax.scan(step, x0, xs, unroll=unroll)
        return jnp.sum(ys) + jnp.sum(c)

    def fn(ws, x0, xs):
        return jax.value_and_grad(loss, argnums=(0, 1))(ws, x0, xs)

    return fn, (ws, x0, xs)


def build_nested_scan(depth: int, length: int, body: int, grad: bool) -> tuple[Callable, tuple]:
    """``depth`` nested ``lax.scan`` levels of ``length`` each around a matmul+tanh body."""
    width = 32
    ws = [sds((width, width)) for _ in range(body)]
    x_spec = sds((width,))

    def nest(ws, x):
        def run(level, c):
            if level == 0:
                return _stages(c, ws)
            c, _ = lax.scan(lambda c, _: (run(level - 1, c), None), c, None, length=length)
            return c

        return run(depth, x)

    if not grad:

        def fn(ws, x):
            return nest(ws, x)

    else:

        def fn(ws, x):
            return jax.value_and_grad(lambda ws: jnp.sum(nest(ws, x) ** 2))(ws)

    return fn, (ws, x_spec)


def build_scan_seed(length: int, width: int, mode: str) -> tuple[Callable, tuple]:
    """User report: ``jit(grad(f))`` of a scan whose carry is ``(level, s)``.

    Args:
        length: Number of scan steps (80 in the report).
        width: Size of ``s`` (2 in the report).
        mode: "grad" (the report) or "forward".
    """
    if mode not in ("grad", "forward"):
        raise ValueError(f"mode must be 'grad' or 'forward', got {mode!r}")
    ys = np.ones(length, dtype=np.float32)

    def f(s):
        def scan_fn(carry, y_t):
            level, s = carry
            exp_val = (level + 2 * level**0.5) * s[0]
            exp_val = jnp.clip(exp_val, min=0)
            level = y_t / s[0] + 0.5 * level
            s = y_t / level + 0.5 * s
            return (level, s), exp_val

        return lax.scan(scan_fn, (jnp.float32(1.0), s), ys)[1].sum()

    if mode == "grad":

        def fn(s):
            return jax.grad(f)(s)

    else:

        def fn(s):
            return f(s)

    return fn, (sds((width,)),)


def build_ode(style: str, steps: int, dim: int, grad: bool) -> tuple[Callable, tuple]:
    """RK4 integration of the Lorenz-96 system, unrolled or as a ``lax.scan``.

    With ``grad`` the program is value_and_grad of the final state's energy with
    respect to the initial state and the forcing.
    """
    check_style(style)
    dt = np.float32(0.01)
    # Shifts as permutation-matrix matmuls rather than jnp.roll: an all-elementwise RK4
    # chain fuses into one huge fusion and compiles pathologically slowly (16 unrolled
    # grad steps took >2 min), which would swamp the sweep.
    eye = np.eye(dim, dtype=np.float32)
    shift_diff = np.roll(eye, -1, axis=1) - np.roll(eye, 2, axis=1)  # x @ it = x[i+1]-x[i-2]
    shift_back = np.roll(eye, 1, axis=1)  # x @ it = x[i-1]

    def field(x, forcing):
        return (x @ shift_diff) * (x @ shift_back) - x + forcing

    def rk4(x, forcing):
        k1 = field(x, forcing)
        k2 = field(x + 0.5 * dt * k1, forcing)
        k3 = field(x + 0.5 * dt * k2, forcing)
        k4 = field(x + dt * k3, forcing)
        return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    def integrate(x, forcing):
        if style == "unrolled":
            for _ in range(steps):
                x = rk4(x, forcing)
            return x
        return lax.scan(lambda c, _: (rk4(c, forcing), None), x, None, length=steps)[0]

    if not grad:

        def fn(x, forcing):
            return integrate(x, forcing)

    else:

        def fn(x, forcing):
            energy = lambda x, f: jnp.sum(integrate(x, f) ** 2)  # noqa: E731
            return jax.value_and_grad(energy, argnums=(0, 1))(x, forcing)

    return fn, (sds((dim,)), sds(()))


_LOOP_STEPS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1500)


def _ode_point_kept(p: dict) -> bool:
    """Unrolled RK4 points worth their compile time (long runs only at dim=8)."""
    if p["grad"]:
        return p["steps"] <= 12 or (p["steps"] in (16, 64) and p["dim"] == 8)
    return p["steps"] <= 64 or p["dim"] == 8


register(
    Family(
        name="loop",
        description="One step body repeated: unrolled Python loop vs lax.scan vs lax.fori_loop.",
        build=build_loop,
        # Same steps for every style so the advice can compare them point by point.
        # Unrolled cost grows superlinearly in steps*body stages: 1500 ~2-4 s, 3000 (steps
        # 1500, body 2) ~31-35 s wall / 15-17 s CPU loaded, 4000 (steps=1000, body=4) 25 s
        # quiet / 87 s wall loaded; 6000 (steps=1500, body=4) took 246 s: left out.
        # Rolled loops cost ~0.13 s whatever the trip count.
        grid=param_grid(
            style=("unrolled",),
            steps=_LOOP_STEPS,
            body=(1, 2, 4),
            width=(16, 256),
            unroll=(1,),
            where=lambda p: (
                p["steps"] * p["body"] < 4000
                or (p["steps"], p["body"], p["width"]) == (1000, 4, 16)
            ),
        )
        + param_grid(
            style=("scan",),
            steps=_LOOP_STEPS,
            body=(1, 4),
            width=(16, 256),
            unroll=(1, 8),
            where=lambda p: p["unroll"] == 1 or p["width"] == 16,
        )
        + param_grid(style=("fori",), steps=_LOOP_STEPS, body=(1, 4), width=(16,), unroll=(1,)),
    )
)

register(
    Family(
        name="scan_grad",
        description="value_and_grad of a lax.scan (backward pass through the loop).",
        build=build_scan_grad,
        # Cost follows body*unroll stages: 16 ~2-3 s, 256 (body=16, unroll=16) ~16-20 s
        # wall / ~10 s CPU, which is kept only at length 4096.
        grid=param_grid(
            length=(16, 256, 4096),
            body=(1, 2, 4, 16),
            width=(16, 256),
            unroll=(1, 4, 16),
            where=lambda p: (
                p["body"] * p["unroll"] <= 16
                or (p["body"], p["unroll"], p["length"]) == (16, 16, 4096)
            ),
        ),
    )
)

register(
    Family(
        name="nested_scan",
        description="Nested lax.scan loops (1-3 levels), forward or value_and_grad.",
        build=build_nested_scan,
        # Largest: depth=3, body=16, grad ~2-3 s.
        grid=param_grid(depth=(1, 2, 3), length=(2, 16, 128), body=(1, 4, 16), grad=(False, True)),
    )
)

register(
    Family(
        name="scan_seed",
        description="User report: jit(grad(f)) of a scan with a (level, s) carry over 80 steps.",
        build=build_scan_seed,
        grid=param_grid(
            length=(5, 10, 20, 40, 80, 160, 320, 640, 1280),
            width=(2, 16, 128),
            mode=("grad", "forward"),
        ),
        tags=("seed",),
    )
)

register(
    Family(
        name="ode_rk4",
        description="RK4 integrator of Lorenz-96, unrolled vs lax.scan, forward or grad.",
        build=build_ode,
        # Unrolled RK4 is costly: 16 grad steps ~8 s, 64 grad steps ~22-37 s, 128 forward
        # steps expected ~20 s, 256 forward steps ~67 s; long runs are kept at dim=8 only.
        # A scan costs ~0.5-1.3 s whatever its length.
        grid=param_grid(
            style=("unrolled",),
            steps=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256),
            dim=(8, 64),
            grad=(False, True),
            where=_ode_point_kept,
        )
        + param_grid(style=("scan",), steps=(1, 4, 16, 64, 256), dim=(8, 64), grad=(False, True)),
    )
)
