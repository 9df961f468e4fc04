"""What a complex op costs inside an XLA:CPU fusion, in float32 adds.

XLA keeps complex ops whole in HLO and expands each into real arithmetic only when it
emits the fused loop's code (a complex multiply into several real ones), so the
fusion emulator cannot count the expansion from the module: it has to weigh the op. This
times one long elementwise chain (a single fusion) per op kind and element type on a (64,)
vector, interleaved in one process with the reference program, and expresses each as an
equivalent: the number of float32 adds in a chain that compiles as slowly, read off the
add chains' own curve (log-log interpolation, extrapolated along its last segment), per
op of the pattern. Unary kinds are chained as `op(y) + w_i`, so their figure includes the
add (and for `abs` of a complex value, the convert back to complex).

Found (2026-12-05, AMD EPYC; `bench/FINDINGS.md`, "Complex numbers"): a complex add costs 2-3 adds, a
multiply or divide 2.4-4.4, chained `abs` 6-8, `exp` 7-12, `tanh` 18-20, `log` 15-41 and
a square root 250-320. The figures move with the chain's length (add 1.9 at 128 steps and
3.2 at 512, log 41 at 64 and 15 at 256): a weight per op is only a first approximation.

    python bench/archive/complex_op_cost.py [--rounds 3] [--json bench/results/complex_op_cost.json]
"""

from __future__ import annotations

import math

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import jax.numpy as jnp
import numpy as np
from _compile_timing import medians, rounds_command, with_reference

WIDTH = 64
ADD_SIZES = (128, 512, 2048, 4096)
STEPS = (128, 512)
# a chain of complex square roots compiles in time growing faster than the square of its
# length (8: 1.5 s, 16: 6.7 s, 24: 19 s, 32: 37 s and 1.5 GB), so it is timed short; log
# and tanh at 512 take tens of seconds
STEPS_OF = {"sqrt": (8, 16), "log": (64, 256), "tanh": (64, 256)}
KINDS = {
    "add": lambda y, w: y + w,
    "multiply": lambda y, w: y * w,
    "divide": lambda y, w: y / w,
    "exp": lambda y, w: jnp.exp(y) + w,
    "log": lambda y, w: jnp.log(y) + w,
    "sqrt": lambda y, w: jnp.sqrt(y) + w,
    "tanh": lambda y, w: jnp.tanh(y) + w,
    "abs": lambda y, w: jnp.abs(y) + w,
}
DTYPES = {"float32": np.float32, "complex64": np.complex64}


def chain(kind: str, steps: int, dtype):
    """`steps` applications of `KINDS[kind]`, each with a row of one input: one fusion
    of two inputs (a chain reading a parameter of its own per step compiles much slower,
    in the number of inputs: 1024 float32 adds 3.3 s, against 0.26 and 1.44 s for 512 and
    2048 reading rows of one input)."""
    step = KINDS[kind]

    def fn(x, weights):
        y = x
        for i in range(steps):
            y = step(y, weights[i])
        return y
    return fn, (jnp.ones((WIDTH,), dtype), jnp.ones((steps, WIDTH), dtype))


def label(kind: str, steps: int, dtype: str) -> str:
    return f"{dtype} {kind} x{steps}"


def equivalent_adds(seconds: float, add_seconds: dict[int, float]) -> float:
    """The float32 add chain length that compiles in `seconds`: log-log interpolation on
    the measured add chains, extrapolated along the nearest segment."""
    sizes = sorted(add_seconds)
    logs = [(math.log(n), math.log(add_seconds[n])) for n in sizes]
    target = math.log(seconds)
    for (n0, t0), (n1, t1) in zip(logs, logs[1:]):
        if target <= t1 or (n1, t1) == logs[-1]:
            slope = (t1 - t0) / (n1 - n0)
            return math.exp(n0 + (target - t0) / slope)
    raise AssertionError("unreachable")


def run(rounds: int) -> dict:
    builds = {label("add", n, "float32"): (lambda n=n: chain("add", n, np.float32))
              for n in ADD_SIZES}
    for kind in KINDS:
        for dtype, np_dtype in DTYPES.items():
            for steps in STEPS_OF.get(kind, STEPS):
                builds[label(kind, steps, dtype)] = (
                    lambda kind=kind, steps=steps, np_dtype=np_dtype: chain(kind, steps, np_dtype))
    times = with_reference(builds, rounds)
    seconds = medians(times)
    add_seconds = {n: seconds[label("add", n, "float32")] for n in ADD_SIZES}
    print("float32 add chains: " + ", ".join(f"{n}: {s:.3f} s" for n, s in add_seconds.items()),
          flush=True)
    weights: dict = {}
    for kind in KINDS:
        for dtype in DTYPES:
            per_op = {}
            for steps in STEPS_OF.get(kind, STEPS):
                s = seconds[label(kind, steps, dtype)]
                per_op[steps] = equivalent_adds(s, add_seconds) / steps
                print(f"{dtype:9} {kind:8} x{steps:<4} {s:7.3f} s = {per_op[steps]:6.2f} adds per step",
                      flush=True)
            weights.setdefault(kind, {})[dtype] = per_op
    return {"rounds": rounds, "width": WIDTH, "add_sizes": ADD_SIZES,
            "steps": {kind: STEPS_OF.get(kind, STEPS) for kind in KINDS},
            "times_s": times, "median_s": seconds, "adds_per_step": weights}


def main() -> None:
    rounds_command(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
