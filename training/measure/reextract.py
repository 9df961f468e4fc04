"""Recompute the features of stored rows when the feature schema changes.

Labels are measurements and stay; features are a function of the program alone, so each
row's program is rebuilt from its family and params and lowered again (never compiled),
for the same backend and target, through the extractor the sweep uses. A row whose
measurement failed (status other than ok) and whose program does not lower here either
is kept as it was: it never had features, and its failure is the record (45 deviceless
H100 rows of programs that ask for a GPU while tracing). Rows whose family is unknown
here, or whose measured program no longer lowers, are reported and left out of the
written rows; the command writes them beside (`NAME.left_out.parquet`, with why), so
overwriting a dataset loses no measurement.

Each family lowers in a fresh process, as it does in a sweep: a long-lived process that
has lowered hundreds of other programs lowers some library programs differently (seen:
26 numpyro, blackjax, optax and optimistix rows), and a process that lowered for the CPU
cannot then lower for a GPU target.

    python -m costmodel.training.measure.reextract training/data/gpu-h100/rows.parquet [--out P]
    python -m costmodel.training.measure.reextract bench/data/outside_libraries/measured.parquet \
        --module bench/evaluations/outside_programs.py
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd


def row_features(family: str, params: dict, backend: str, target: str, place) -> dict:
    """`Features.to_dict()` of one corpus program, lowered as the sweep lowers it (a
    sharded variant's arguments sharded by its strategy over the topology)."""
    from costmodel.features import from_lowered
    from costmodel.measure.sharding import sharded_placement, split_params

    from .. import corpus

    params, strategy = split_params(params)
    if strategy is not None:
        place = sharded_placement(place, strategy)
    traced, lowered = corpus.lower(place, family, params)
    return from_lowered(traced, lowered, backend=backend, target=target).to_dict()


def _lower_group(backend: str, target: str, rows: list[tuple[str, str, str]],
                 modules: tuple[str, ...] = ()) -> list:
    """In a fresh process: (key, feature cells or None, why not) for each (key, family,
    params) of one family on one placement; `modules` (files or module names) register
    families first, as a sweep's `modules` do."""
    from costmodel.measure.harness import placement
    from costmodel.measure.rows import feature_cells
    from costmodel.measure.user_modules import import_module_or_file

    for module in modules:
        import_module_or_file(module)

    place = placement(backend, target)
    done = []
    for key, family, params in rows:
        try:
            features = row_features(family, json.loads(params), backend, target, place)
        except Exception as exc:  # a program that no longer builds: say so, keep going
            done.append((key, None, f"{type(exc).__name__}: {exc}"[:300]))
            continue
        done.append((key, feature_cells(features), None))
    return done


def reextract(data: pd.DataFrame, progress: bool = True, modules: tuple[str, ...] = ()
              ) -> tuple[pd.DataFrame, list[str]]:
    """`data` with every feature column recomputed, and the keys of rows left out (why);
    `modules` register families defined outside the corpus (a bench's programs). Failed
    measurements that do not lower are kept unchanged (module docstring)."""
    from tqdm import tqdm

    groups: dict[tuple[str, str, str], list] = {}
    for row in data.itertuples(index=False):
        place = (row.backend, row.target or "", row.family)
        groups.setdefault(place, []).append((row.key, row.family, row.params))
    cells: dict[str, dict] = {}
    failed = set(data["key"][data["status"] != "ok"]) if "status" in data else set()
    dropped = []
    # one process per family: spawned, never reused, so no family sees another's state
    context = multiprocessing.get_context("spawn")
    with tqdm(total=len(data), disable=not progress, desc="re-extract", unit="row") as bar:
        for (backend, target, _), rows in groups.items():
            with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                done = pool.submit(_lower_group, backend, target, rows, modules).result()
            for key, features, why in done:
                if features is not None:
                    cells[key] = features
                elif key in failed:
                    cells[key] = {}  # kept as it was
                else:
                    dropped.append(f"{key}: {why}")
            bar.update(len(rows))
    updated = [{**row, **cells[row["key"]]} for row in data.to_dict("records")
               if row["key"] in cells]
    # the rows' own column order, then any feature column the schema has added
    columns = list(dict.fromkeys([*data.columns, *(updated[0] if updated else ())]))
    return pd.DataFrame(updated, columns=columns), dropped


def stale_rows(data: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the rows whose features lack what a later schema added and cannot be filled in,
    or whose features a later schema changed, the rest with the added features filled
    in), `with_added_features` done on `data`."""
    from costmodel.features.schema import ADDED
    from costmodel.measure.rows import FEATURE_PREFIX

    from ..store.dataset import behind_schema, with_added_features

    data = with_added_features(data.copy())
    added = [FEATURE_PREFIX + name for names, _ in ADDED.values() for name in names]
    stale = (data[added].isna().any(axis=1) | behind_schema(data)) & (data["status"] == "ok")
    return data[stale].reset_index(drop=True), data[~stale].reset_index(drop=True)


def left_out(data: pd.DataFrame, fresh: pd.DataFrame, dropped: list[str]) -> pd.DataFrame:
    """The rows of `data` that `reextract` left out of `fresh`, unchanged, each with its
    line of `dropped` ("KEY: why") as `left_out_why` (keys hold ": " themselves)."""
    aside = data[~data["key"].isin(set(fresh["key"]))]
    why = [next((line[len(key) + 2:] for line in dropped if line.startswith(f"{key}: ")), "")
           for key in aside["key"]]
    return aside.assign(left_out_why=why)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a parquet file of dataset rows")
    parser.add_argument("--out", default=None, help="where to write (default: overwrite)")
    parser.add_argument("--stale-only", action="store_true",
                        help="lower again only the rows that lack features a later schema "
                             "added (the rest gain them as zeros: dataset.with_added_features)")
    parser.add_argument("--module", action="append", default=[],
                        help="a file or module that registers families the rows use "
                             "(e.g. bench/evaluations/outside_programs.py); repeatable")
    args = parser.parse_args(argv)
    # as in a measurement process: a GPU target lowers deviceless, on a machine whose
    # CUDA driver (if any) the plugin would otherwise refuse before jax starts
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    data = pd.read_parquet(args.data)
    if args.stale_only:  # the rows keep their order: a fit's subsampling follows it
        data, kept = stale_rows(data.assign(_order=range(len(data))))
        fresh, dropped = reextract(data, modules=tuple(args.module))
        print(f"{len(data)} rows lower again, {len(kept)} gain the added features as zeros")
        fresh = (pd.concat([kept, fresh], ignore_index=True)[kept.columns]
                 .sort_values("_order").drop(columns="_order").reset_index(drop=True))
        data = data.drop(columns="_order")
    else:
        fresh, dropped = reextract(data, modules=tuple(args.module))
    for line in dropped:
        print("left out", line, file=sys.stderr)
    out = Path(args.out or args.data)
    fresh.to_parquet(out, index=False)
    print(f"{len(fresh)} rows written, {len(dropped)} left out -> {out}")
    if dropped:
        aside = out.with_name(out.name.removesuffix(".parquet") + ".left_out.parquet")
        left_out(data, fresh, dropped).to_parquet(aside, index=False)
        print(f"the rows left out, as they were, with why -> {aside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
