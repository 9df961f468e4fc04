"""Do per-phase sub-models predict compile time better than one model of the whole?

Every traced CPU row (its compile profiled, `measure/phases.py`) splits into HLO passes,
backend and the rest (`phases.part_seconds`). Held out by library on the real programs,
this compares:

- `whole_all`: the shipped recipe, trained on every CPU row (synthetic ones included);
- `whole_traced`: the same recipe trained only on the traced rows;
- `parts_traced`: one model per part, each with its own size law (the shipped recipe on
  that part's seconds), trained on the traced rows; the prediction is their sum.

Scores are against the measured compile seconds of the real programs only, brought to the
traced rows' median reference time: median, p90 and max fold error, Spearman, share
within 2x. `whole_all` predicts for the median reference of all rows (the synthetic ones
were measured at a faster reference), so its figures here are not the model card's;
compare `whole_traced` with `parts_traced`, which share rows and reference.

    python bench/archive/phase_submodels.py [--data training/data/cpu/rows.parquet] [--jobs 2]
                                    [--json bench/results/phase_submodels.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.measure.phases import part_seconds
from costmodel.models.phase_shares import PARTS
from costmodel.training.evaluation import metrics
from costmodel.training.evaluation.evaluate import predictions
from costmodel.training.fitting.fit import libraries, select_rows
from costmodel.training.store import dataset

DATA = Path(__file__).resolve().parents[2] / "training" / "data" / "cpu" / "rows.parquet"
FLOOR = 0.01  # a part below 1% of the compile is trace noise; a label must be positive


def held_out(rows: pd.DataFrame, jobs: int) -> pd.DataFrame:
    """Leave-one-library-out predictions of compile seconds (`point`) and what they are
    scored against (`actual`: seconds at the median reference time), by row position."""
    pred = predictions(rows, "leave_library_out", models=("costmodel",), jobs=jobs)
    pred = pred[pred["target"] == "compile_seconds"]
    return pred.set_index("row")[["point", "actual"]].sort_index()


def scores(predicted: np.ndarray, actual: np.ndarray) -> dict:
    return {"median_fold": metrics.median_fold(predicted, actual),
            "p90_fold": metrics.p90_fold(predicted, actual),
            "spearman": metrics.spearman(predicted, actual),
            "within_2x": metrics.within(predicted, actual),
            "max_fold": float(np.max(metrics.fold_errors(predicted, actual)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=[str(DATA)])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = select_rows(dataset.load(args.data), "cpu").reset_index(drop=True)
    parts = [part_seconds(r) for r in rows.to_dict("records")]
    traced = rows[[p is not None for p in parts]].reset_index(drop=True)
    split = pd.DataFrame([p for p in parts if p is not None])
    real = libraries(traced) != ""
    print(f"{len(rows)} rows, {len(traced)} traced, {int(real.sum())} of them real programs")

    # whole_all scores the traced real rows by their positions in `rows`
    position = rows.index[[p is not None for p in parts]].to_numpy()
    whole_all = held_out(rows, args.jobs)["point"].reindex(position).to_numpy()
    traced_fit = held_out(traced, args.jobs).reindex(range(len(traced)))
    whole_traced, actual = traced_fit["point"].to_numpy(), traced_fit["actual"].to_numpy()
    total = np.zeros(len(traced))
    for part in PARTS:
        share = (split[part] / split.sum(axis=1)).clip(lower=FLOOR)
        part_rows = traced.assign(compile_seconds=traced["compile_seconds"] * share)
        total += held_out(part_rows, args.jobs)["point"].reindex(range(len(traced))).to_numpy()
    real &= np.isfinite(actual)
    report = {"rows": len(rows), "traced_rows": len(traced), "real_rows": int(real.sum()),
              **{name: scores(pred[real], actual[real]) for name, pred in (
                  ("whole_all", whole_all), ("whole_traced", whole_traced),
                  ("parts_traced", total))}}
    for name in ("whole_all", "whole_traced", "parts_traced"):
        s = report[name]
        print(f"{name:<13} median {s['median_fold']:.3f}  p90 {s['p90_fold']:.2f}  "
              f"Spearman {s['spearman']:.3f}  within 2x {s['within_2x']:.1%}  "
              f"max {s['max_fold']:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
