"""Which real programs does the model miss most when their library is held out?

Runs the model card's leave-one-library-out split (the shipped recipe, the shipped CPU
data) and lists the real programs with the largest compile-time fold error, beside the
op-count power law fitted on the same folds, with a few of their features, so a max-fold
failure can be traced to a kind of program rather than a number.

    python bench/evaluations/worst_programs.py [--data training/data/cpu/rows.parquet] [--top 20]
                                   [--jobs 1] [--json bench/results/worst_programs.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.measure.rows import FEATURE_PREFIX
from costmodel.training.evaluation.evaluate import predictions
from costmodel.training.fitting.fit import model_params, select_rows
from costmodel.training.store import dataset

DATA = Path(__file__).resolve().parents[2] / "training" / "data" / "cpu" / "rows.parquet"
SHOWN_FEATURES = ("hlo_ops_inlined", "dense_constant_bytes", "fold_elements",
                  "fusion_cost_squares", "sequence_kernel_squares")


def worst(rows: pd.DataFrame, top: int, jobs: int) -> list[dict]:
    pred = predictions(rows, "leave_library_out", ("costmodel", "power_law"),
                       model_params("cpu"), jobs=jobs)
    pred = pred[pred["target"] == "compile_seconds"]
    ours = pred[pred["model"] == "costmodel"].set_index("row")
    law = pred[pred["model"] == "power_law"].set_index("row")["point"]
    fold = np.maximum(ours["point"] / ours["actual"], ours["actual"] / ours["point"])
    out = []
    for row in fold.sort_values(ascending=False).index[:top]:
        source = rows.iloc[row]
        out.append({"family": source["family"], "params": source["params"],
                    "actual": float(ours.at[row, "actual"]),
                    "predicted": float(ours.at[row, "point"]),
                    "interval": [float(ours.at[row, "lo"]), float(ours.at[row, "hi"])],
                    "power_law": float(law.at[row]), "fold": float(fold.at[row]),
                    **{name: float(source[FEATURE_PREFIX + name]) for name in SHOWN_FEATURES
                       if FEATURE_PREFIX + name in source}})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = select_rows(dataset.load(args.data), "cpu")
    found = worst(rows, args.top, args.jobs)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")
    for item in found:
        print(f"{item['fold']:6.1f}x  {item['family']:28s} {item['params']:60.60s} "
              f"measured {item['actual']:8.2f}s  predicted {item['predicted']:8.2f}s  "
              f"power law {item['power_law']:8.2f}s  ops {item.get('hlo_ops_inlined', 0):.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
