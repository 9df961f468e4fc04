"""Which programs' held-out residuals should set the TPU correction's 90% interval? Each
pool's coverage of the corpus's real-library programs, the outside libraries' and both,
every library held out of the bounds it is scored against.

    python bench/evaluations/tpu_interval_pools.py [--json OUT]

Reads the same inputs as the correction's fit (the TPU sweep rows, held-out predictions,
chip rows, phase rows, the outside programs' inputs and normalized chip rows).
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.training.fitting import device_correction as dc
from costmodel.training.fitting import device_parts
from costmodel.training.fitting.device_outside import with_outside
from costmodel.training.store import dataset


def held_out_residuals():
    _, device = dc.read_device_rows(sorted(glob.glob("bench/data/tpu_device/*.jsonl")))
    p = dc.pairs(dataset.load(["training/data/tpu-v5e/rows.parquet"]),
                 pd.read_parquet("bench/data/tpu_sharded/heldout.parquet"), device)
    _, outside = dc.read_device_rows(["bench/data/tpu_outside/normalized.jsonl"])
    p = with_outside(p, pd.read_parquet("bench/data/tpu_outside/features.parquet"), outside)
    parts = device_parts.part_rows(dataset.load(["training/data/tpu-v5e-phases/rows.parquet"]))
    correction, _ = dc.held_out_correction(p, parts)
    return p.y - correction, p.frame["library"].to_numpy(), p.frame["outside"].to_numpy(bool)


def coverage(residual, libs, pool, weighted: bool) -> np.ndarray:
    hit = np.zeros(len(residual), bool)
    for lib in np.unique(libs):
        test, keep = libs == lib, pool & (libs != lib)
        lo, hi = (dc.interval_bounds(residual, libs, keep) if weighted
                  else np.quantile(residual[keep], dc.QUANTILES))
        hit[test] = (residual[test] >= lo) & (residual[test] <= hi)
    return hit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    residual, libs, outside = held_out_residuals()
    real = libs != "synthetic"
    corpus = real & ~outside
    out = {}
    for name, pool, weighted in (("real, by program", real, False),
                                 ("real, each library the same", real, True),
                                 ("outside only", outside, False),
                                 ("corpus only", corpus, False)):
        hit = coverage(residual, libs, pool, weighted)
        out[name] = {"corpus": float(hit[corpus].mean()), "outside": float(hit[outside].mean()),
                     "all_real": float(hit[real].mean())}
        print(f"{name:30s} " + "  ".join(f"{k} {v:.3f}" for k, v in out[name].items()))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
