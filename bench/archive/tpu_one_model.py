"""One cost model for both hosts: the TPU model's recipe fitted on the deviceless sweep rows
(this machine) and the chip rows (the v5e host) together, with a `chip_host` input (0 or
1), each library held out of everything; scored on the chip's real-library programs.

    python bench/archive/tpu_one_model.py [--chip-weight 10] [--json OUT] [--out PREDICTIONS.parquet]

The experiment behind the device correction's chip model (`training/fitting/
device_one_model.py`; bench/FINDINGS.md, "A fresh process on the chip's host").
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd

import costmodel.training.fitting.estimator as estimator
from costmodel.features import MODEL_FEATURES
from costmodel.features.sharding import PLACEMENT_INPUTS
from costmodel.training.fitting import fit as F
from costmodel.training.fitting.device_correction import read_device_rows

ROOT = Path(__file__).resolve().parents[2]
estimator.PLACEMENT_INPUTS = (*PLACEMENT_INPUTS, "chip_host")  # the host as one more input


def _chip_seconds(paths) -> dict[str, float]:
    seconds: dict[str, list[float]] = {}
    for r in read_device_rows(paths)[1]:
        if r.get("status") == "ok" and r.get("device_s"):
            seconds.setdefault(r["key"], []).extend(r["device_s"])
    return {k: statistics.median(v) for k, v in seconds.items()}


def load(chip_weight: float):
    """Rows of both hosts: features, seconds, reference (none on the chip), library,
    family, kind (D deviceless, C the corpus on the chip, O outside programs), weight, key."""
    rows = pd.read_parquet(ROOT / "training/data/tpu-v5e/rows.parquet")
    rows = rows[rows.status == "ok"].drop_duplicates("key")
    sharded = pd.read_parquet(ROOT / "training/data/tpu-v5e/sharded.parquet")
    D = pd.concat([rows, sharded[sharded.status == "ok"]], ignore_index=True)
    XD = F.features_frame(D).assign(chip_host=0.0)
    chip = _chip_seconds(sorted(glob.glob(str(ROOT / "bench/data/tpu_device/*.jsonl"))))
    C = rows.set_index("key").loc[[k for k in chip if k in set(rows.key)]].reset_index()
    XC = F.features_frame(C).assign(chip_host=1.0)
    outside = pd.read_parquet(ROOT / "bench/data/tpu_outside/features.parquet")
    outside = outside.drop_duplicates("key").set_index("key")
    ochip = _chip_seconds([ROOT / "bench/data/tpu_outside/normalized.jsonl"])
    ok = [k for k in ochip if k in outside.index]
    XO = pd.DataFrame({n: outside.loc[ok, f"f_{n}"].to_numpy(float) for n in MODEL_FEATURES})
    XO = XO.assign(chips=1.0, sharded_args=0.0, sharded_input_share=0.0, chip_host=1.0)
    X = pd.concat([XD, XC, XO], ignore_index=True)
    y = np.concatenate([D.compile_seconds.to_numpy(float), [chip[k] for k in C.key],
                        [ochip[k] for k in ok]])
    ref = np.concatenate([D.ref_seconds.to_numpy(float), np.full(len(C) + len(ok), np.nan)])
    lib = np.concatenate([F.libraries(D), F.libraries(C), outside.loc[ok, "library"]]).astype(object)
    fam = np.concatenate([F.families(D), F.families(C), [k.split("|")[0] for k in ok]]).astype(object)
    kind = np.array(["D"] * len(D) + ["C"] * len(C) + ["O"] * len(ok))
    weight = np.where(kind != "D", F.row_weights(lib) * chip_weight / 3.0, F.row_weights(lib))
    return X, y, ref, lib, fam, kind, weight, list(D.key) + list(C.key) + ok


def held_out(chip_weight: float) -> pd.DataFrame:
    X, y, ref, lib, fam, kind, weight, keys = load(chip_weight)
    groups = np.where(lib != "", lib, fam)
    pred = np.full(len(y), np.nan)
    for held in sorted(set(lib[(kind != "D") & (lib != "")])):
        train = groups != held
        model = estimator.CompileCostModel(**F.model_params("tpu", {}))
        model.fit(X[train].reset_index(drop=True), {"compile_seconds": y[train]},
                  groups=groups[train], reference=ref[train], sample_weight=weight[train],
                  interval_rows=lib[train] != "")
        test = ~train & (kind != "D")
        pred[test] = model.predict(X[test].reset_index(drop=True))["compile_seconds"]["point"]
    keep = (kind != "D") & (lib != "")
    return pd.DataFrame({"key": np.array(keys)[keep], "predicted": pred[keep],
                         "chip": y[keep], "outside": kind[keep] == "O", "library": lib[keep]})


def folds(log_ratio: np.ndarray) -> dict:
    a = np.abs(log_ratio)
    return {"n": len(a), "median_fold": float(np.exp(np.median(a))),
            "p90_fold": float(np.exp(np.quantile(a, 0.9))), "bias": float(np.exp(-np.mean(log_ratio)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chip-weight", type=float, default=10.0)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--out", type=Path, help="write each program's held-out prediction")
    args = parser.parse_args()
    got = held_out(args.chip_weight)
    r = np.log(got.predicted / got.chip).to_numpy()
    out = got.outside.to_numpy(bool)
    text = json.dumps({"chip_weight": args.chip_weight, "all_real": folds(r),
                       "corpus": folds(r[~out]), "outside": folds(r[out])}, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if args.out:
        got.to_parquet(args.out)


if __name__ == "__main__":
    main()
