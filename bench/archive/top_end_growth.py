"""Does the CPU model grow too fast with size on outside programs? Each builder of
`bench/evaluations/outside_top_programs.py` at its top size and at the size the outside-libraries run
measured, compiled interleaved in one process with the reference program, so the machine's
drift cancels from each builder's ratio of the two.

`bench/data/outside_top/` and `outside_top_baseline/` measured the two sizes in separate
runs minutes apart; calibrated, the top was over-predicted about 1.5x and the baseline not,
but scaled by the reference timed beside each program both were over-predicted alike. Here
each builder's measured growth (top over baseline, medians of the rounds) is set against
the model's predicted growth: a ratio under 1 means the model's growth is too steep.

    python bench/archive/top_end_growth.py [--rounds 3] [--json bench/results/top_end_growth.json]
"""

from __future__ import annotations

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import numpy as np
import outside_programs
import outside_top_programs
from _compile_timing import medians, rounds_command, with_reference

import costmodel
from costmodel.models import load_default


def baseline_params(builder) -> dict:
    """The largest size of `builder` the outside-libraries run measured (the last listed)."""
    return [params for fn, params in outside_programs.PROGRAMS if fn is builder][-1]


def pairs() -> dict[str, tuple]:
    """Builder name -> ((builder, baseline sizes), (builder, top sizes))."""
    return {builder.__name__: ((builder, baseline_params(builder)), (builder, top))
            for builder, top in outside_top_programs.PROGRAMS}


def run(rounds: int) -> dict:
    builds, predicted = {}, {}
    for name, sizes in pairs().items():
        for label, (builder, params) in zip(("baseline", "top"), sizes):
            key = f"{name} {label}"
            builds[key] = lambda builder=builder, params=params: builder(**params)
            fn, args = builder(**params)
            predicted[key] = costmodel.predict(fn, *args).compile_seconds
    times = with_reference(builds, rounds)
    median = medians(times)
    rows = []
    for name in pairs():
        base, top = f"{name} baseline", f"{name} top"
        measured_growth = median[top] / median[base]
        predicted_growth = predicted[top] / predicted[base]
        rows.append({"builder": name, "baseline_s": median[base], "top_s": median[top],
                     "predicted_baseline_s": predicted[base], "predicted_top_s": predicted[top],
                     "measured_growth": measured_growth, "predicted_growth": predicted_growth,
                     "growth_ratio": measured_growth / predicted_growth})
        print(f"{name:34} measured {median[base]:6.2f} -> {median[top]:6.2f} s "
              f"(x{measured_growth:.2f}), predicted x{predicted_growth:.2f}: "
              f"ratio {measured_growth / predicted_growth:.2f}", flush=True)
    ratios = [row["growth_ratio"] for row in rows]
    print(f"median ratio of measured to predicted growth: {np.median(ratios):.2f}")
    return {"rounds": rounds, "reference_s": median["(reference)"],
            "times_s": times, "pairs": rows,
            "median_growth_ratio": float(np.median(ratios)),
            "model": load_default("cpu").version}


def main() -> None:
    rounds_command(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
