"""How well the fusion emulator follows XLA: its total fused ops against the instruction
count of XLA's optimized module, which every stored CPU row has (`hlo_instructions`).

    python bench/archive/fusion_vs_xla.py training/data/cpu/rows.parquet --dump /tmp/fusion-dump

lowers a sample of the rows (three per family, `--per-family`) into --dump once (a rerun
reuses what is there), then fits log(instructions) on log(count) for the StableHLO op
count and for the emulator's total and prints each fit's correlation and the median and
90th percentile of its absolute log residual. Lowering only: nothing is compiled.
Findings: `bench/archive/fusion_emulation.md`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd


def dump(rows: pd.DataFrame, folder: Path) -> None:
    from costmodel.measure.harness import placement
    from costmodel.training import corpus

    place = placement("cpu", "")
    folder.mkdir(parents=True, exist_ok=True)
    for row in rows.itertuples():
        path = folder / f"{hashlib.sha1(row.key.encode()).hexdigest()[:12]}.mlir"
        if not path.exists():
            _, lowered = corpus.lower(place, row.family, json.loads(row.params))
            path.write_text(lowered.as_text())


def emulated(path: Path) -> tuple[float, float]:
    """(StableHLO ops inlined, total fused ops) of one dumped module."""
    from costmodel.features.stablehlo.assemble import stablehlo_features
    from costmodel.features.stablehlo.parse import parse_module

    values, _ = stablehlo_features(parse_module(path.read_text()))
    return values["hlo_ops_inlined"], values["fusion_groups"] * values["fusion_mean_size"]


def fit(counts: np.ndarray, instructions: np.ndarray) -> str:
    x, y = np.log(np.maximum(counts, 1.0)), np.log(instructions)
    residual = np.abs(y - np.polyval(np.polyfit(x, y, 1), x))
    return (f"corr {np.corrcoef(x, y)[0, 1]:.3f}, median {np.median(residual):.3f}, "
            f"p90 {np.quantile(residual, 0.9):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", help="a parquet of stored CPU rows")
    parser.add_argument("--dump", type=Path, required=True, help="folder of lowered modules")
    parser.add_argument("--per-family", type=int, default=3)
    args = parser.parse_args()
    rows = pd.read_parquet(args.rows)
    rows = rows[(rows.status == "ok") & (rows.hlo_instructions > 0)]
    sample = rows.sample(frac=1.0, random_state=0).groupby("family").head(args.per_family)
    dump(sample, args.dump)
    ops, fused = zip(*(emulated(args.dump / f"{hashlib.sha1(k.encode()).hexdigest()[:12]}.mlir")
                       for k in sample.key))
    instructions = sample.hlo_instructions.to_numpy(float)
    print(f"{len(sample)} rows: StableHLO op count {fit(np.array(ops), instructions)}")
    print(f"{len(sample)} rows: emulated fused ops {fit(np.array(fused), instructions)}")


if __name__ == "__main__":
    main()
