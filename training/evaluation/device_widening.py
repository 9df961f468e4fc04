"""How far the chip's interval widens for programs of libraries no fit has seen.

The device correction sets its interval from held-out residuals, each library held out of
the fit in turn, and on those it covers about 93%. Programs of libraries nobody here had
labelled fall outside it more often: each outside suite, scored as shipped before any of
it joined a fit (`bench/evaluations/tpu_outside.py score`), was covered 62-74% of the time.
So the interval's log offsets are multiplied by one factor (`DeviceCorrection.widening`):
the smallest that puts 90% of those programs inside, each library weighing the same and
counted split-conformally (`interval_widening.library_quantile`). A user's program is
nearly always of such a library.

    python -m costmodel.training.evaluation.device_widening --model models/default/tpu-v5e \\
        --results bench/results/tpu_outside.json bench/results/tpu_outside_c.json \\
        bench/results/tpu_outside_fft.json bench/results/tpu_outside_de.json \\
        [--json bench/results/tpu_widening.json] [--dry-run]

Each results file holds the programs of one suite with the chip prediction and interval
they had as shipped (`ours`, `lo`, `hi`) and their chip seconds (`measured`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models.artifact import load
from costmodel.models.device_correction import CORRECTION_FILE, DeviceCorrection

from ..fitting.device_card import write_widening_line
from ..fitting.device_correction import install
from .interval_widening import library_quantile

COVERAGE = 0.9


def ratios(results: dict, name: str) -> pd.DataFrame:
    """Per program of one suite: its log error over its interval's log offset on the side
    it fell (inside: at most 1), its library, and the suite's `name`."""
    rows = results["rows"]
    measured, ours, lo, hi = (np.array([r[k] for r in rows], float)
                              for k in ("measured", "ours", "lo", "hi"))
    error = np.log(measured / ours)
    offset = np.where(error >= 0, np.log(hi / ours), np.log(ours / lo))
    return pd.DataFrame({"ratio": np.abs(error) / offset,
                         "library": [r["library"] for r in rows], "suite": name})


def factor(frame: pd.DataFrame, coverage: float = COVERAGE) -> float:
    """The smallest multiplier of the log offsets (at least 1) that covers `coverage` of
    the programs, each library weighing the same."""
    return max(1.0, library_quantile(frame["ratio"], frame["library"], coverage))


def fit(frame: pd.DataFrame, coverage: float = COVERAGE) -> dict:
    """The factor and what it does: each suite's coverage before and after, and the
    coverage with each library's programs held out of the factor they are scored by."""
    chosen = factor(frame, coverage)
    library = frame["library"].to_numpy()
    held = np.zeros(len(frame), bool)
    for name in np.unique(library):
        mine = library == name
        held[mine] = frame["ratio"].to_numpy()[mine] <= factor(frame[~mine], coverage)
    by_suite = frame.groupby("suite", sort=False)
    return {"factor": round(chosen, 4), "coverage": coverage, "programs": int(len(frame)),
            "libraries": int(frame["library"].nunique()),
            "coverage_before": {s: round(float((g["ratio"] <= 1).mean()), 3)
                                for s, g in by_suite},
            "coverage_after": {s: round(float((g["ratio"] <= chosen).mean()), 3)
                               for s, g in by_suite},
            "coverage_library_held_out": round(float(held.mean()), 3)}


def widened(correction: DeviceCorrection, report: dict) -> DeviceCorrection:
    """`correction` with the fitted factor, recorded in what it says it was fitted on."""
    return replace(correction, widening=report["factor"],
                   about={**correction.about, "widening": report})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--results", type=Path, nargs="+", required=True)
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--dry-run", action="store_true", help="report only; install nothing")
    args = parser.parse_args(argv)
    frame = pd.concat([ratios(json.loads(path.read_text()), path.stem)
                       for path in args.results], ignore_index=True)
    report = fit(frame)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if not args.dry_run:
        correction = load(args.model).device_correction
        if correction is None:
            parser.error(f"{args.model} has no {CORRECTION_FILE} to widen")
        install(args.model, widened(correction, report))
        write_widening_line(args.model, report)
        print(f"installed {args.model / CORRECTION_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
