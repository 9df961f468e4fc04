"""Does `costmodel profile` slow down the compile it measures?

`bench/phase_overhead.py` prices the harness's phase trace; this prices the command
itself. For the same 8 corpus programs (0.05-5 s compiles), interleaved in one process
with the one that goes first alternating: a plain compile (the harness's
`compile_once`), and `costmodel.profile` of the same program, each from a fresh function
object. Reported per program: the median ratio of the compile `profile` measured (under
its `jax.profiler` trace) to the plain compile, and the whole call's wall time over the
plain compile (prediction, warm-up compile of the reference program, trace start, stop
and read included: what a user waits for, not what is measured).

    python bench/profile_overhead.py --repeats 5   # writes bench/results/profile_overhead.json
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from phase_overhead import PROGRAMS, builder, started_cpu

LIMIT = 1.15  # the bar: profile adds at most 15% to the compile it measures
OUT = Path(__file__).with_name("results") / "profile_overhead.json"


def profiled(build) -> tuple[float, float]:
    """(the compile seconds `costmodel.profile` measured, the call's wall seconds)."""
    import costmodel

    fn, args = build()
    start = time.perf_counter()
    result = costmodel.profile(fn, *args)
    return result.compile_seconds, time.perf_counter() - start


def main() -> None:
    args, events, place = started_cpu(__doc__.splitlines()[0], OUT)
    from costmodel.measure.harness import compile_once
    from costmodel.measure.machine import environment

    rows = []
    for family, params, _ in PROGRAMS:
        build = builder(family, params)
        plain, measured, wall = [], [], []
        for repeat in range(args.repeats):
            for is_profile in ((False, True) if repeat % 2 == 0 else (True, False)):
                if is_profile:
                    seconds, call = profiled(build)
                    measured.append(seconds)
                    wall.append(call)
                else:
                    plain.append(compile_once(build, place, events)[1])
        ratios = [m / p for m, p in zip(measured, plain)]
        rows.append({"family": family, "params": params, "plain_seconds": plain,
                     "profiled_seconds": measured, "call_seconds": wall,
                     "ratio_median": statistics.median(ratios), "ratios": ratios,
                     "call_over_plain_median": statistics.median(
                         w / p for w, p in zip(wall, plain))})
        print(f"{family:12s} plain {statistics.median(plain):7.3f} s  profiled/plain "
              f"{rows[-1]['ratio_median']:.3f}  call/plain {rows[-1]['call_over_plain_median']:.2f}",
              flush=True)
    ratios = [r["ratio_median"] for r in rows]
    env = environment()
    summary = {
        "command": f"python bench/profile_overhead.py --repeats {args.repeats}",
        "repeats": args.repeats, "limit": LIMIT,
        "machine": {k: env[k] for k in ("cpu_model", "cpu_count", "jax_version")},
        "load_average_after": os.getloadavg(),
        "ratio_median_over_programs": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "ratio_median_all_pairs": statistics.median(x for r in rows for x in r["ratios"]),
        "programs_within_limit": sum(r <= LIMIT for r in ratios),
        "programs": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"profiled/plain median {summary['ratio_median_over_programs']:.3f} over programs "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}); {summary['programs_within_limit']}/"
          f"{len(rows)} within {LIMIT:.2f}; wrote {args.out}")


if __name__ == "__main__":
    main()
