"""Does `costmodel calibrate` carry the shipped model to a machine that compiles differently?

The machine this runs on is measured twice: as it is, and as a machine with one core
(every process pinned to one CPU, so XLA's parallel code generation gets one thread: the
part of a compile that differs most between machines). In each condition the calibration
set is measured as `costmodel calibrate` measures it, then a fixed set of real-corpus
programs is measured in fresh processes as sweeps do, and the shipped model's predictions
are compared with the measurements uncalibrated and scaled each way
`_calibration_views` names (the reference program alone; the set's part factors weighted
by each program's predicted phase shares; the reference speed `costmodel calibrate`
applies). Median and p90 fold error against measured compile seconds.

    python bench/evaluations/calibration_effect.py [--programs 16] [--max-seconds 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
from _calibration_views import VIEWS, factors
from tqdm import tqdm

from costmodel.models import load_default
from costmodel.training.evaluation import metrics
from costmodel.training.fitting.fit import features_frame, select_rows
from costmodel.training.measure.calibrate import calibrate
from costmodel.training.measure.runner import close_zygotes, run_child

DATA = Path(__file__).resolve().parents[2] / "training" / "data" / "cpu" / "rows.parquet"


@contextmanager
def cores(which: set[int] | None):
    """This process and every child it starts run on `which` CPUs (None: as they are).
    Zygotes started before would keep their own affinity: they are ended on both sides."""
    before = os.sched_getaffinity(0)
    close_zygotes()
    if which is not None:
        os.sched_setaffinity(0, which)
    try:
        yield
    finally:
        close_zygotes()
        os.sched_setaffinity(0, before)


def pick_rows(count: int, max_seconds: float) -> pd.DataFrame:
    """`count` real-corpus rows spread evenly over the log of compile time."""
    rows = select_rows(pd.read_parquet(DATA), "cpu")
    rows = rows[(rows["library"].fillna("") != "") & (rows["compile_seconds"] <= max_seconds)]
    rows = rows.sort_values("compile_seconds")
    index = np.unique(np.linspace(0, len(rows) - 1, count).round().astype(int))
    return rows.iloc[index].reset_index(drop=True)


def measure(rows: pd.DataFrame, label: str) -> np.ndarray:
    seconds = []
    for record in tqdm(rows.to_dict("records"), desc=label, unit="prog"):
        spec = {"family": record["family"], "params": json.loads(record["params"]),
                "backend": "cpu", "target": "", "max_repeats": 2}
        result = run_child(spec)
        seconds.append(result.get("compile_seconds", np.nan) if result["status"] == "ok"
                       else np.nan)
    return np.asarray(seconds, float)


def errors(predicted: np.ndarray, measured: np.ndarray) -> dict:
    ok = np.isfinite(measured)
    return {"median_fold": metrics.median_fold(predicted[ok], measured[ok]),
            "p90_fold": metrics.p90_fold(predicted[ok], measured[ok]),
            "measured_over_predicted": float(np.median(measured[ok] / predicted[ok]))}


def condition(name: str, which: set[int] | None, rows: pd.DataFrame, artifact) -> dict:
    inputs = features_frame(rows).to_dict("records")
    predicted = artifact.predict(inputs)["compile_seconds"]["point"]
    shares = artifact.predictor.part_shares(inputs)
    with cores(which), tempfile.TemporaryDirectory() as tmp:
        record = calibrate(path=Path(tmp) / "calibration.json", model=artifact)
        measured = measure(rows, name)
    views = factors(record, shares, artifact.manifest)
    per_part = np.broadcast_to(views["per_part"], predicted.shape)
    out = {"condition": name, "programs": int(np.isfinite(measured).sum()),
           **{f"{view}_scale": float(np.median(views[view])) for view in VIEWS},
           "part_scales": record["part_scales"],
           "program_scales": {"min": float(per_part.min()), "max": float(per_part.max())},
           "uncalibrated": errors(predicted, measured),
           **{view: errors(predicted * views[view], measured) for view in VIEWS},
           "rows": [{"family": r["family"], "params": r["params"], "predicted": float(p),
                     "measured": float(m), "per_part_scale": float(s)}
                    for r, p, m, s in zip(rows.to_dict("records"), predicted, measured,
                                          per_part)]}
    print(f"{name:<9} " + ", ".join(f"{view} x{out[f'{view}_scale']:.2f}" for view in VIEWS)
          + "; parts " + ", ".join(f"{k} x{v:.2f}" for k, v in (record["part_scales"] or {}).items())
          + "; median/p90 fold: " + "  ".join(
              f"{kind} {out[kind]['median_fold']:.2f}/{out[kind]['p90_fold']:.2f}"
              for kind in ("uncalibrated", *VIEWS)), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=16)
    parser.add_argument("--max-seconds", type=float, default=8.0,
                        help="largest training compile time among the chosen programs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    artifact = load_default("cpu")
    if not artifact.manifest.get("calibration_set") or artifact.predictor.phase_shares is None:
        raise SystemExit("the shipped CPU model has no calibration set or phase shares")
    rows = pick_rows(args.programs, args.max_seconds)
    first = min(os.sched_getaffinity(0))
    results = [condition("as is", None, rows, artifact),
               condition("one core", {first}, rows, artifact)]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
