"""The TPU device correction's part models, against the alternatives, with each library
held out (bench/FINDINGS.md, "The chip's host, part by part"). No compiles: sweep rows,
phase rows, held-out predictions and chip rows only.

    python bench/evaluations/tpu_device_parts.py [--json OUT]
        [--earlier CORRECTION.npz --new-in DEVICE_ROWS...]

Real-library programs, median / p90 fold against the chip, for: this machine's measured
compile times a constant; its measured parts each times a fitted factor (an oracle); the
model's held-out prediction against this machine's measurement; the step alone, the part
models alone and blends of the two at several weights. With `--earlier`, also an earlier
correction file (e.g. `git show REV:models/default/tpu-v5e/device_correction.npz`) against
this one, held out, on the programs of `--new-in` that the earlier one never saw.
"""

from __future__ import annotations

import argparse
import glob
import json

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES
from costmodel.measure.phases import part_seconds
from costmodel.models.device_correction import DeviceCorrection
from costmodel.models.phase_shares import PARTS
from costmodel.training.fitting import device_correction as dc
from costmodel.training.fitting import device_parts as dp
from costmodel.training.store import dataset

WEIGHTS = (0.0, 0.3, 0.5, 0.7, 1.0)


def _folds(log_errors: np.ndarray) -> dict:
    f = np.exp(np.abs(log_errors))
    return {"n": int(len(f)), "median_fold": round(float(np.median(f)), 3),
            "p90_fold": round(float(np.quantile(f, 0.9)), 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="training/data/tpu-v5e/rows.parquet")
    parser.add_argument("--phase-rows", default="training/data/tpu-v5e-phases/rows.parquet")
    parser.add_argument("--predictions", default="bench/data/tpu_sharded/heldout.parquet")
    parser.add_argument("--device-rows", nargs="+",
                        default=sorted(glob.glob("bench/data/tpu_device/*.jsonl")))
    parser.add_argument("--earlier", help="an earlier device_correction.npz")
    parser.add_argument("--new-in", nargs="*", default=[],
                        help="device rows of programs the earlier correction never saw")
    parser.add_argument("--json")
    args = parser.parse_args()
    _, device = dc.read_device_rows(args.device_rows)
    p = dc.pairs(dataset.load([args.rows]), pd.read_parquet(args.predictions), device)
    phase = dataset.load([args.phase_rows])
    parts = dp.part_rows(phase)
    libs, chip = p.frame["library"].to_numpy(), p.frame["device"].to_numpy(float)
    base = np.log(p.frame["base"].to_numpy(float))
    real = libs != dp.SYNTHETIC
    out = {"pairs": len(chip), "phase_rows": len(parts)}

    # measured here: the phase run's own seconds, whole and by part
    split = {r["key"]: part_seconds(r) for r in phase.to_dict("records")}
    measured = np.array([[split[k][q] for q in PARTS] if split.get(k) else [np.nan] * 3
                         for k in p.frame.index])
    has = ~np.isnan(measured[:, 0]) & real
    whole = np.log(measured.sum(axis=1))
    constant = np.array([np.median((np.log(chip) - whole)[has & (libs != lib)]) for lib in libs])
    oracle = np.full(len(chip), np.nan)
    oracle[has] = dp.held_out_log_seconds(measured[has], chip[has], libs[has])
    out["measured_here_times_constant"] = _folds((np.log(chip) - whole - constant)[has])
    out["measured_parts_times_factors"] = _folds((np.log(chip) - oracle)[has])
    gap = whole - base
    out["model_against_measured_here"] = _folds((gap - np.median(gap[has]))[has])

    step = dc.held_out(p)
    by_parts, held = dc.held_out_by_parts(p, parts)
    out["factors_all"] = dict(zip(PARTS, dp.fit_factors(held, chip).round(4).tolist()))
    for w in WEIGHTS:
        out[f"blend_{w}"] = _folds((p.y - ((1 - w) * step + w * by_parts))[real])
    if args.earlier:
        out["earlier_on_new_programs"] = _earlier(args, p, (1 - 0.5) * step + 0.5 * by_parts)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(text + "\n")


def _earlier(args, p, held_out: np.ndarray) -> dict:
    """The earlier correction, this one held out, and none, on programs first measured in
    `--new-in` (not in the other device rows)."""
    new = {r["key"] for r in dc.read_device_rows(args.new_in)[1] if "key" in r}
    seen = {r["key"] for path in args.device_rows if path not in args.new_in
            for r in dc.read_device_rows([path])[1] if "key" in r}
    fresh = np.array([k in new and k not in seen for k in p.frame.index])
    inputs = [dict(zip(MODEL_FEATURES, row))
              for row in p.frame[list(MODEL_FEATURES)].to_numpy(float)]
    earlier = DeviceCorrection.load(args.earlier).log_factor(inputs, p.frame["base"].to_numpy())
    return {"programs": int(fresh.sum()),
            "real_library": int((fresh & (p.frame["library"] != dp.SYNTHETIC)).sum()),
            "earlier": _folds((p.y - earlier)[fresh]), "this_held_out": _folds(
                (p.y - held_out)[fresh]), "none": _folds(p.y[fresh])}


if __name__ == "__main__":
    main()
