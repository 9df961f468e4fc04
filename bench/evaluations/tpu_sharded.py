"""How well does the TPU model predict sharded programs? Its held-out predictions scored on
the sharded rows (a `v5e:2x2` or `v5e:4x4` target) apart from the single-chip rows.

    python -m costmodel.training.build training/data/tpu-v5e/rows.parquet \\
        training/data/tpu-v5e-sharded/rows.parquet --backend tpu --target v5e \\
        --predictions-out PRED.parquet --jobs 2
    python bench/evaluations/tpu_sharded.py PRED.parquet training/data/tpu-v5e/rows.parquet \\
        training/data/tpu-v5e-sharded/rows.parquet [--json OUT.json]

The predictions are the build's evaluation: each library held out of training in turn
(`leave_library_out`; a sharded row is held out with its library's single-chip rows), so
the scores are for programs of a library the model never saw, on one chip or sharded.
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd

from costmodel.training.evaluation.by_placement import scores
from costmodel.training.store import dataset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("predictions", help="the build's --predictions-out parquet")
    parser.add_argument("rows", nargs="+", help="the dataset rows the model was built on")
    parser.add_argument("--json", help="write the scores here too")
    args = parser.parse_args(argv)
    rows = dataset.load(args.rows)
    rows = rows[(rows["status"] == "ok") & (rows["backend"] == "tpu")]
    result = scores(pd.read_parquet(args.predictions), rows)
    for group, models in result.items():
        for model, m in models.items():
            shown = {k: float("nan") if m.get(k) is None else m[k]
                     for k in ("median_fold", "p90_fold", "spearman", "coverage")}
            print(f"{group:24s} {model:18s} n={m['n']:4d} median fold "
                  f"{shown['median_fold']:.3f} p90 {shown['p90_fold']:.3f} spearman "
                  f"{shown['spearman']:.3f} 90% coverage {shown['coverage']:.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
