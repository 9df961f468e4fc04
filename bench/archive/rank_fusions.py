"""Does an array fusion's compile grow with its rank? The wide fusion of
`bench/archive/scalar_fusions.py` (a sum of N sine terms over N inputs) over operands of 336
elements each, as one to four dimensions, compiled interleaved in one process with the
reference program.

Why ask: brax's physics steps (`bench/evaluations/outside_programs_b1.py`) run over (batch, bodies,
3) arrays and compile about twice as long as predicted, although the fusion emulator finds
as many fusions as XLA makes; the emulated cost of a fused op does not depend on rank.

    python bench/archive/rank_fusions.py [--rounds 3] [--json bench/results/rank_fusions.json]
"""

from __future__ import annotations

import math

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
from _compile_timing import rounds_command
from scalar_fusions import label, timed_wide_sums

SIZES = (128, 256)
SHAPES = ((336,), (48, 7), (16, 7, 3), (4, 4, 7, 3))


def run(rounds: int) -> dict:
    times, seconds = timed_wide_sums(SIZES, SHAPES, rounds)
    over_rank_1 = {}
    for shape in SHAPES:
        small, large = (seconds[label(terms, shape)] for terms in SIZES)
        over_rank_1[str(shape)] = large / seconds[label(SIZES[-1], SHAPES[0])]
        print(f"shape {str(shape):13} rank {len(shape)}: {small:.3f} s at {SIZES[0]} terms, "
              f"{large:.3f} s at {SIZES[-1]} (growth exponent "
              f"{math.log(large / small) / math.log(SIZES[-1] / SIZES[0]):.2f}; "
              f"{over_rank_1[str(shape)]:.2f}x rank 1)", flush=True)
    return {"rounds": rounds, "sizes": SIZES, "times_s": times, "median_s": seconds,
            "over_rank_1": over_rank_1}


def main() -> None:
    rounds_command(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
