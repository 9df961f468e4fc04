"""The device correction's chip model alone (`training/fitting/device_one_model.py`: the
recipe fitted on the TPU sweep's deviceless rows and the chip's rows together, the host
one more input), each library held out; scored on the chip's real-library programs.

    python bench/archive/tpu_one_model.py [--json OUT] [--out PREDICTIONS.parquet]

The experiment behind that model (bench/FINDINGS.md, "A fresh process on the chip's host").
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.training.fitting import device_correction as dc
from costmodel.training.fitting import device_one_model as one
from costmodel.training.fitting.device_outside import with_outside
from costmodel.training.store import dataset

ROOT = Path(__file__).resolve().parents[2]


def chip_pairs() -> dc.Pairs:
    """The device correction's pairs: the corpus's chip programs and the outside ones."""
    _, device = dc.read_device_rows(sorted(glob.glob(str(ROOT / "bench/data/tpu_device/*.jsonl"))))
    p = dc.pairs(dataset.load([ROOT / "training/data/tpu-v5e/rows.parquet"]),
                 pd.read_parquet(ROOT / "bench/data/tpu_sharded/heldout.parquet"), device)
    _, outside = dc.read_device_rows([ROOT / "bench/data/tpu_outside/normalized.jsonl"])
    return with_outside(p, pd.read_parquet(ROOT / "bench/data/tpu_outside/features.parquet"),
                        outside)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--out", type=Path, help="write each program's held-out prediction")
    args = parser.parse_args()
    p = chip_pairs()
    held = one.held_out_log_seconds(dataset.load([ROOT / "training/data/tpu-v5e"]), p.frame)
    frame = p.frame.assign(predicted=np.exp(held))
    real = frame[frame["library"] != one.SYNTHETIC]
    r = np.log(real["device"] / real["predicted"]).to_numpy()
    out = real["outside"].to_numpy(bool)
    text = json.dumps({"chip_weight": one.CHIP_ROW_WEIGHT, "all_real": dc.folds(r),
                       "corpus": dc.folds(r[~out]), "outside": dc.folds(r[out])}, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if args.out:
        real[["predicted", "device", "library", "outside"]].to_parquet(args.out)


if __name__ == "__main__":
    main()
