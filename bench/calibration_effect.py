"""Does `costmodel calibrate` fix predictions when the timing environment changes?

For each condition (the machine as it is; then the other cores kept busy by spinning
processes) we calibrate (time the reference program, as `costmodel calibrate` does), then
measure a fixed set of programs from the shipped dataset in fresh processes, exactly as
the sweep does, and compare the default model's predictions with and without the
calibration scale: median and p90 fold error against the measured compile seconds.

    python bench/calibration_effect.py [--programs 12] [--max-seconds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models import load_default
from costmodel.training import metrics
from costmodel.training.calibrate import time_reference
from costmodel.training.fit import features_frame, select_rows
from costmodel.training.runner import run_child

DATA = Path(__file__).resolve().parents[1] / "training" / "data" / "cpu" / "rows.parquet"


def spin() -> None:
    while True:
        pass


@contextmanager
def busy(cores: int):
    """`cores` processes spinning at full speed for the duration of the block."""
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(cores)]
    for proc in spinners:
        proc.start()
    try:
        yield
    finally:
        for proc in spinners:
            proc.terminate()
            proc.join()


def pick_rows(count: int, max_seconds: float) -> pd.DataFrame:
    """`count` rows spread evenly over the log of compile time, up to `max_seconds`."""
    rows = select_rows(pd.read_parquet(DATA), "cpu")
    rows = rows[rows["compile_seconds"] <= max_seconds].sort_values("compile_seconds")
    index = np.unique(np.linspace(0, len(rows) - 1, count).round().astype(int))
    return rows.iloc[index].reset_index(drop=True)


def condition(name: str, rows: pd.DataFrame, predicted: np.ndarray,
              reference_model: float, budget: float) -> dict:
    scale = float(np.median(time_reference(budget))) / reference_model
    measured = []
    for _, row in rows.iterrows():
        spec = {"family": row["family"], "params": json.loads(row["params"]),
                "backend": "cpu", "target": "", "max_repeats": 2}
        result = run_child(spec)
        measured.append(result.get("compile_seconds", np.nan) if result["status"] == "ok"
                        else np.nan)
    measured = np.asarray(measured, float)
    ok = np.isfinite(measured)
    errors = {kind: {"median_fold": metrics.median_fold(pred, measured[ok]),
                     "p90_fold": metrics.p90_fold(pred, measured[ok])}
              for kind, pred in (("uncalibrated", predicted[ok]),
                                 ("calibrated", predicted[ok] * scale))}
    out = {"condition": name, "scale": scale, "programs": int(ok.sum()), **errors,
           "measured_over_predicted_median": float(np.median(measured[ok] / predicted[ok]))}
    print(f"{name:<10} scale {scale:5.2f}  measured/predicted (median) "
          f"{out['measured_over_predicted_median']:5.2f}  fold error median/p90: "
          f"uncalibrated {out['uncalibrated']['median_fold']:.2f}/"
          f"{out['uncalibrated']['p90_fold']:.2f}  calibrated "
          f"{out['calibrated']['median_fold']:.2f}/{out['calibrated']['p90_fold']:.2f}",
          flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=12)
    parser.add_argument("--max-seconds", type=float, default=5.0,
                        help="largest training compile time among the chosen programs")
    parser.add_argument("--budget", type=float, default=20.0, help="calibration seconds")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    artifact = load_default("cpu")
    rows = pick_rows(args.programs, args.max_seconds)
    predicted = artifact.predict(features_frame(rows).to_dict("records"))
    predicted = predicted["compile_seconds"]["point"]
    reference_model = float(artifact.manifest["reference_seconds"])
    results = [condition("as is", rows, predicted, reference_model, args.budget)]
    with busy(max((os.cpu_count() or 2) - 1, 1)):
        results.append(condition("busy", rows, predicted, reference_model, args.budget))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
