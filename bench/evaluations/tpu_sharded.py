"""How well does the TPU model predict sharded programs? Its held-out predictions scored on
the sharded rows (a `v5e:2x2` or `v5e:4x4` target) apart from the single-chip rows.

    python -m costmodel.training.build training/data/tpu-v5e/rows.parquet \\
        training/data/tpu-v5e-sharded/rows.parquet --backend tpu --target v5e \\
        --predictions-out PRED.parquet --jobs 2
    python bench/evaluations/tpu_sharded.py PRED.parquet training/data/tpu-v5e/rows.parquet \\
        training/data/tpu-v5e-sharded/rows.parquet [--json OUT.json]

The shipped model's are committed: `bench/data/tpu_sharded/heldout.parquet` (the build of
2026-12-06 00:08-00:18 UTC), scored with
`python bench/evaluations/tpu_sharded.py bench/data/tpu_sharded/heldout.parquet
training/data/tpu-v5e`. The predictions are the build's evaluation: each library held out of training in turn
(`leave_library_out`; a sharded row is held out with its library's single-chip rows), so
the scores are for programs of a library the model never saw, on one chip or sharded.
`--passes` scores against each row's geometric mean over more measurements of it (the
sharded rows' second quiet pass: `bench/data/tpu_sharded/pass2_rows.parquet`).
It also prints how well a sharded program's own measured one-chip time (reference-
normalized, as the evaluation scores) times the median factor of its topology and strategy
predicts its sharded time: what knowing the program exactly, but not its sharding's cost,
would do.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd

from costmodel.training.evaluation.by_placement import scores
from costmodel.training.store import dataset


def twin_baseline(rows: pd.DataFrame) -> dict:
    """Median and p90 fold of "one-chip twin's seconds x the median sharded/one-chip ratio of
    its (target, strategy)", on reference-normalized seconds, over sharded rows with a twin."""
    def base(params: str) -> str:
        return json.dumps({k: v for k, v in json.loads(params).items() if k != "sharding"},
                          sort_keys=True)

    sharded = rows[rows["target"].str.contains(":")].assign(base=lambda r: r["params"].map(base))
    single = rows[~rows["target"].str.contains(":")]
    pairs = sharded.merge(single[["family", "params", "compile_seconds", "ref_seconds"]],
                          left_on=["family", "base"], right_on=["family", "params"],
                          suffixes=("", "_one"))
    ratio = np.log((pairs["compile_seconds"] / pairs["ref_seconds"])
                   / (pairs["compile_seconds_one"] / pairs["ref_seconds_one"]))
    fold = np.exp(np.abs(ratio - pairs.assign(r=ratio).groupby(["target", "sharding"])["r"]
                         .transform("median")))
    return {"median_fold": float(np.median(fold)), "p90_fold": float(np.percentile(fold, 90)),
            "n": int(len(fold))}


def with_passes(rows: pd.DataFrame, predictions: pd.DataFrame, passes: list[pd.DataFrame]
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows and held-out predictions relabelled by more measurements of the same rows: a
    row measured again takes the geometric mean of its reference-normalized seconds over
    all its passes (`compile_seconds` and `ref_seconds` each the geometric mean), and each
    prediction's `actual` moves by the same factor."""
    log = {}  # key -> [log compile, log ref] of each later pass
    for again in passes:
        ok = again[again["status"] == "ok"]
        for key, c, r in zip(ok["key"], ok["compile_seconds"], ok["ref_seconds"]):
            log.setdefault(key, []).append((np.log(c), np.log(r)))
    rows = rows.copy()
    factor = pd.Series(1.0, index=rows["key"])
    for i, key in enumerate(rows["key"]):
        if key not in log:
            continue
        c, r = float(rows["compile_seconds"].iat[i]), float(rows["ref_seconds"].iat[i])
        cs = [np.log(c)] + [a for a, _ in log[key]]
        rs = [np.log(r)] + [b for _, b in log[key]]
        new_c, new_r = float(np.exp(np.mean(cs))), float(np.exp(np.mean(rs)))
        factor[key] = (new_c / new_r) / (c / r)
        rows.iloc[i, rows.columns.get_loc("compile_seconds")] = new_c
        rows.iloc[i, rows.columns.get_loc("ref_seconds")] = new_r
    predictions = predictions.copy()
    seconds = predictions["target"] == "compile_seconds"
    predictions.loc[seconds, "actual"] *= predictions.loc[seconds, "key"].map(
        factor[~factor.index.duplicated()]).fillna(1.0).to_numpy()
    return rows, predictions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("predictions", help="the build's --predictions-out parquet")
    parser.add_argument("rows", nargs="+", help="the dataset rows the model was built on")
    parser.add_argument("--passes", nargs="*", default=[],
                        help="more measurements of the same rows (parquet): labels become "
                             "each row's geometric mean over all its passes")
    parser.add_argument("--json", help="write the scores here too")
    args = parser.parse_args(argv)
    rows = dataset.load(args.rows)
    rows = rows[(rows["status"] == "ok") & (rows["backend"] == "tpu")]
    predictions = pd.read_parquet(args.predictions)
    if args.passes:
        rows, predictions = with_passes(rows, predictions,
                                        [pd.read_parquet(p) for p in args.passes])
    result = scores(predictions, rows)
    for group, models in result.items():
        for model, m in models.items():
            shown = {k: float("nan") if m.get(k) is None else m[k]
                     for k in ("median_fold", "p90_fold", "spearman", "coverage")}
            print(f"{group:24s} {model:18s} n={m['n']:4d} median fold "
                  f"{shown['median_fold']:.3f} p90 {shown['p90_fold']:.3f} spearman "
                  f"{shown['spearman']:.3f} 90% coverage {shown['coverage']:.3f}")
    twin = twin_baseline(rows)
    print(f"one-chip twin x constant: n={twin['n']} median fold {twin['median_fold']:.3f} "
          f"p90 {twin['p90_fold']:.3f}")
    result["one-chip twin x constant"] = twin
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
