"""Recompute the features of stored rows when the feature schema changes.

Labels are measurements and stay; features are a function of the program alone, so each
row's program is rebuilt from its family and params and lowered again (never compiled),
for the same backend and target, through the extractor the sweep uses. Rows whose family
is unknown here, or whose program no longer lowers, are reported and left out.

    python -m costmodel.training.measure.reextract training/data/gpu-h100/rows.parquet [--out P]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd


def row_features(family: str, params: dict, backend: str, target: str, place) -> dict:
    """`Features.to_dict()` of one corpus program, lowered as the sweep lowers it."""
    from costmodel.features import from_lowered

    traced, lowered = place.lower_corpus(family, params)
    return from_lowered(traced, lowered, backend=backend, target=target).to_dict()


def reextract(data: pd.DataFrame, progress: bool = True) -> tuple[pd.DataFrame, list[str]]:
    """`data` with every feature column recomputed, and the keys of rows left out (why)."""
    from tqdm import tqdm

    from ..store.dataset import feature_cells
    from .harness import placement

    places, updated, dropped = {}, [], []
    for _, row in tqdm(data.iterrows(), total=len(data), disable=not progress,
                       desc="re-extract", unit="row"):
        backend, target = row["backend"], row["target"] or ""
        if (backend, target) not in places:
            places[backend, target] = placement(backend, target)
        try:
            features = row_features(row["family"], json.loads(row["params"]), backend, target,
                                    places[backend, target])
        except Exception as exc:  # a program that no longer builds: say so, keep going
            dropped.append(f"{row['key']}: {type(exc).__name__}: {exc}"[:300])
            continue
        updated.append({**row.to_dict(), **feature_cells(features)})
    # the rows' own column order, then any feature column the schema has added
    columns = list(dict.fromkeys([*data.columns, *(updated[0] if updated else ())]))
    return pd.DataFrame(updated, columns=columns), dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a parquet file of dataset rows")
    parser.add_argument("--out", default=None, help="where to write (default: overwrite)")
    args = parser.parse_args(argv)
    # as in a measurement process: a GPU target lowers deviceless, on a machine whose
    # CUDA driver (if any) the plugin would otherwise refuse before jax starts
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    data = pd.read_parquet(args.data)
    fresh, dropped = reextract(data)
    for line in dropped:
        print("left out", line, file=sys.stderr)
    out = Path(args.out or args.data)
    fresh.to_parquet(out, index=False)
    print(f"{len(fresh)} rows re-extracted, {len(dropped)} left out -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
