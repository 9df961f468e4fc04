"""Fit a TPU model's device correction (`costmodel.models.device_correction`) from programs
compiled both deviceless here (the sweep rows) and on the chip (the device rows that
`bench/evaluations/tpu_device_run.py` writes), and score it with each library held out.

The step's input is the model's prediction for a program it did not train on: the
leave-library-out predictions `costmodel.training.build --predictions-out` writes. So the
held-out figures are of model and step together, each blind to the library scored.

    python -m costmodel.training.fitting.device_correction --model models/default/tpu-v5e \\
        --rows training/data/tpu-v5e/rows.parquet --predictions HELD_OUT.parquet \\
        --device-rows bench/data/tpu_device/*.jsonl [--json OUT] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES
from costmodel.models.artifact import MANIFEST_FILE, atomic_write, sha256_of, verify
from costmodel.models.device_correction import BASE_COLUMN, CORRECTION_FILE, DeviceCorrection
from costmodel.models.forest import FlatForest

SPLIT = "leave_library_out"
# Small on purpose: about a hundred programs, a few dozen libraries.
BOOSTER = {"max_depth": 2, "max_iter": 100, "learning_rate": 0.05, "min_samples_leaf": 8,
           "l2_regularization": 1.0, "random_state": 0}
QUANTILES = (0.05, 0.95)


@dataclass
class Pairs:
    """One row per program measured on the chip: model inputs, the held-out base
    prediction, the chip's seconds and host RSS growth, the library, the key."""

    frame: pd.DataFrame

    @property
    def X(self) -> np.ndarray:
        inputs = np.log1p(self.frame[list(MODEL_FEATURES)].to_numpy(float).clip(min=0))
        return np.column_stack([inputs, np.log(self.frame["base"].to_numpy(float))])

    @property
    def y(self) -> np.ndarray:
        return np.log(self.frame["device"].to_numpy(float) / self.frame["base"].to_numpy(float))


def read_device_rows(paths) -> tuple[dict, list[dict]]:
    """(environment, rows) of device-row JSON-lines files, rows in file order."""
    env, rows = {}, []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            if "environment" in record:
                env = record["environment"]
            else:
                rows.append(record)
    return env, rows


def pairs(rows: pd.DataFrame, predictions: pd.DataFrame, device: list[dict]) -> Pairs:
    """Join chip rows to sweep rows (features, library) and held-out base predictions.
    A program measured in several runs keeps the median of all its chip seconds."""
    seconds: dict[str, list[float]] = {}
    rss: dict[str, float] = {}
    for r in device:
        if r.get("status") == "ok" and r.get("device_s"):
            seconds.setdefault(r["key"], []).extend(r["device_s"])
            if r.get("device_rss_bytes"):
                rss[r["key"]] = max(rss.get(r["key"], 0), r["device_rss_bytes"])
    rows = rows[rows["status"] == "ok"].drop_duplicates("key").set_index("key")
    pred = predictions[(predictions["split"] == SPLIT) & (predictions["model"] == "costmodel")
                       & (predictions["target"] == "compile_seconds")].set_index("key")["point"]
    keys = [k for k in seconds if k in rows.index and k in pred.index]
    if not keys:
        raise ValueError("no chip row matches a sweep row with a held-out prediction")
    frame = pd.DataFrame({name: rows.loc[keys, f"f_{name}"].to_numpy(float)
                          for name in MODEL_FEATURES}, index=keys)
    frame["base"] = pred.loc[keys].to_numpy(float)
    frame["device"] = [statistics.median(seconds[k]) for k in keys]
    frame["rss"] = [rss.get(k, math.nan) for k in keys]
    frame["library"] = rows.loc[keys, "library"].fillna("").replace("", "synthetic").to_numpy()
    frame["here"] = rows.loc[keys, "compile_seconds"].to_numpy(float)
    return Pairs(frame)


def _booster():
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(loss="absolute_error", **BOOSTER)


def _one_thread():
    # a hundred rows: OpenMP threads cost more than they give, and on a busy host far more
    import sklearn.ensemble  # noqa: F401  (limits reach only libraries already loaded)
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


def held_out(p: Pairs) -> np.ndarray:
    """Log corrections for each program from a step fitted without its library."""
    X, y, libs = p.X, p.y, p.frame["library"].to_numpy()
    out = np.zeros(len(y))
    with _one_thread():
        for lib in np.unique(libs):
            test = libs == lib
            out[test] = _booster().fit(X[~test], y[~test]).predict(X[test])
    return out


def score(p: Pairs) -> dict:
    """Held-out figures against the chip: the base model alone (times the best constant
    from the other libraries), and the model with the step; the interval of each library
    from the other libraries' held-out residuals."""
    y, libs = p.y, p.frame["library"].to_numpy()
    step = held_out(p)
    residual = y - step
    constant = np.array([np.median(y[libs != lib]) for lib in libs])
    lo = np.array([np.quantile(residual[libs != lib], QUANTILES[0]) for lib in libs])
    hi = np.array([np.quantile(residual[libs != lib], QUANTILES[1]) for lib in libs])
    measured = p.frame["device"].to_numpy(float)
    corrected = p.frame["base"].to_numpy(float) * np.exp(step)
    return {"n": int(len(y)), "libraries": int(len(np.unique(libs))),
            "base_times_constant": folds(y - constant),
            "corrected": {**folds(residual),
                          "coverage": float(np.mean((residual >= lo) & (residual <= hi))),
                          "spearman": spearman(corrected, measured)},
            "sweep_here": folds(np.log(measured / p.frame["here"].to_numpy(float)))}


def folds(log_errors: np.ndarray) -> dict:
    """Fold figures of log(measured / predicted) values."""
    f = np.sort(np.exp(np.abs(log_errors)))
    return {"median_fold": float(np.median(f)),
            "p90_fold": float(f[min(len(f) - 1, math.ceil(0.9 * len(f)) - 1)]),
            "max_fold": float(f[-1]), "bias": float(np.exp(np.mean(log_errors))),
            "median_abs_log": float(np.median(np.abs(log_errors)))}


def spearman(a, b) -> float:
    ra, rb = (pd.Series(v).rank().to_numpy() for v in (a, b))
    return float(np.corrcoef(ra, rb)[0, 1])


def fit(p: Pairs, about: dict) -> DeviceCorrection:
    """The step fitted on every program; its interval from the held-out residuals."""
    residual = p.y - held_out(p)
    with _one_thread():
        booster = _booster().fit(p.X, p.y)
    return DeviceCorrection(
        feature_names=(*MODEL_FEATURES, BASE_COLUMN), forest=FlatForest.from_booster(booster),
        lo=float(np.quantile(residual, QUANTILES[0])),
        hi=float(np.quantile(residual, QUANTILES[1])), about=about)


def install(model: Path, correction: DeviceCorrection) -> None:
    """Write the step beside the model and name it, with its sha256, in the manifest."""
    manifest = verify(model)
    atomic_write(model / CORRECTION_FILE, correction.save)
    manifest["device_correction"] = {"file": CORRECTION_FILE,
                                     "sha256": sha256_of(model / CORRECTION_FILE),
                                     **correction.about}
    text = json.dumps(manifest, indent=2) + "\n"
    atomic_write(model / MANIFEST_FILE, lambda handle: handle.write(text.encode()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--rows", required=True, help="the TPU sweep rows (parquet or folder)")
    parser.add_argument("--predictions", required=True,
                        help="held-out predictions of that model (build --predictions-out)")
    parser.add_argument("--device-rows", nargs="+", required=True)
    parser.add_argument("--json", type=Path, help="write the held-out figures here")
    parser.add_argument("--dry-run", action="store_true", help="score only; install nothing")
    args = parser.parse_args(argv)
    from costmodel.training.store import dataset

    env, device = read_device_rows(args.device_rows)
    p = pairs(dataset.load([args.rows]), pd.read_parquet(args.predictions), device)
    figures = score(p)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if not args.dry_run:
        about = {"programs": figures["n"], "libraries": figures["libraries"],
                 "chip": env.get("device_kind", ""), "libtpu": env.get("libtpu_version", ""),
                 "host_cpu_count": env.get("host_cpu_count", 0),
                 "held_out_median_fold": round(figures["corrected"]["median_fold"], 3)}
        install(args.model, fit(p, about))
        print(f"installed {args.model / CORRECTION_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
