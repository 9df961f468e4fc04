"""Does a fusion of scalars compile like a fusion of arrays? One wide elementwise fusion
(a sum of N sine terms over N inputs) per size and operand shape, compiled interleaved in
one process with the reference program, so the machine's drift cancels from each round.

Schema 16 rests on it: rank-0 ops add nothing to an emulated fusion's cost
(`features/stablehlo/fusion.py`), because XLA:CPU compiles scalars as straight-line code
in time about linear in their ops, while any array, even of shape (1,), becomes a loop
body whose compile grows faster than its ops. The growth exponents printed are of
seconds between the two largest sizes.

    python bench/archive/scalar_fusions.py [--rounds 3] [--json bench/results/scalar_fusions.json]
"""

from __future__ import annotations

import math

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import jax.numpy as jnp
from _compile_timing import medians, rounds_command, with_reference

SIZES = (64, 128, 256)
SHAPES = ((), (1,), (512,))


def wide_sum(terms: int, shape: tuple):
    """`sum_i sin(w_i x + w_{i+7}) w_{i+3} x` over `terms` inputs of `shape`: one fusion."""
    def fn(x, weights):
        total = 0.0
        for i in range(terms):
            total = total + jnp.sin(weights[i] * x + weights[(i + 7) % terms]) \
                * weights[(i + 3) % terms] * x
        return total
    return fn, (jnp.ones(shape), [jnp.ones(shape) for _ in range(terms)])


def label(terms: int, shape: tuple) -> str:
    return f"{terms} terms, shape {shape}"


def timed_wide_sums(sizes: tuple, shapes: tuple, rounds: int) -> tuple[dict, dict]:
    """(times, medians) of `wide_sum` at each size and shape, keyed by `label`, and of the
    reference program, compiled interleaved over `rounds` rounds."""
    times = with_reference({label(terms, shape): lambda terms=terms, shape=shape: wide_sum(terms, shape)
                            for terms in sizes for shape in shapes}, rounds)
    return times, medians(times)


def run(rounds: int) -> dict:
    times, seconds = timed_wide_sums(SIZES, SHAPES, rounds)
    growth = {}
    for shape in SHAPES:
        small, large = (seconds[label(terms, shape)] for terms in SIZES[-2:])
        growth[str(shape)] = math.log(large / small) / math.log(SIZES[-1] / SIZES[-2])
        row = "  ".join(f"{seconds[label(terms, shape)]:.3f}" for terms in SIZES)
        print(f"shape {str(shape):8} seconds at {SIZES} terms: {row}; "
              f"growth exponent {growth[str(shape)]:.2f}", flush=True)
    return {"rounds": rounds, "sizes": SIZES, "times_s": times,
            "median_s": seconds, "growth_exponent": growth}


def main() -> None:
    rounds_command(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
