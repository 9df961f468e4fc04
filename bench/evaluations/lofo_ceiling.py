"""How far can leave-one-family-out compile-time accuracy go on this corpus?

Scores the shipped model structure (`evaluate.predictions`, point estimates only) on the
shipped CPU rows in four ways, each a leave-one-family-out run:

- `shipped`: as trained and evaluated for the default model;
- `optimized_hlo_oracle`: the same, but the op count the model reads (`hlo_ops_inlined`,
  the baseline's size term) replaced by the instruction count of XLA's *optimized* HLO,
  which the sweep recorded after each compile. No prediction made before compiling can
  know it; it bounds what a better emulation of XLA's simplification and fusion could
  give;
- `families_N`: a corpus of N families drawn at random (several draws), each held out in
  turn from the other N-1: how the scores move with the number of families;
- `with_extra`: the shipped rows plus the rows of `--extra`, by default the 915 rows of
  the 16 corpus families the shipped data leaves out (measured on this machine, features
  of the shipped schema), the model's own structure unchanged.

A `families_N` run reports the mean over its draws (and each draw's Spearman).

    python bench/evaluations/lofo_ceiling.py [--extra ROWS ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from tqdm import tqdm

from costmodel.training.evaluation import evaluate
from costmodel.training.fitting.fit import model_params, select_rows
from costmodel.training.store import dataset

ROWS = "training/data/cpu/rows.parquet"
UNSHIPPED = "bench/data/cpu_unshipped_families.parquet"
SUBSET_SIZES = (8, 16, 24)
DRAWS = 3


def lofo_scores(rows, params: dict | None = None) -> dict:
    """Median and p90 fold error and Spearman of the model's held-out compile seconds."""
    pred = evaluate.predictions(rows.reset_index(drop=True), "leave_family_out",
                                models=("costmodel",),
                                params=model_params("cpu", {"n_folds": 0, **(params or {})}))
    pred = pred[pred["target"] == "compile_seconds"]
    scores = evaluate.score(pred)
    return {"rows": scores["n"], "families": int(pred["family"].nunique()),
            **{key: scores[key] for key in ("median_fold", "p90_fold", "spearman")}}


def with_optimized_op_count(rows):
    """`rows` whose model-visible op count is XLA's optimized instruction count."""
    return rows.assign(f_hlo_ops_inlined=rows["hlo_instructions"].astype(float))


def family_subsets(rows, size: int, draws: int, seed: int = 0):
    """`draws` random subsets of `size` families (rows of those families only)."""
    names = np.array(sorted(rows["family"].unique()))
    rng = np.random.default_rng(seed)
    for _ in range(draws):
        chosen = rng.choice(names, size=size, replace=False)
        yield rows[rows["family"].isin(chosen)]


def corpora(extra: list[str]) -> dict[str, list]:
    """The row sets of each run, by run name (a `families_N` run has one per draw)."""
    rows = select_rows(dataset.load([ROWS]), "cpu")
    runs = {"shipped": [rows], "optimized_hlo_oracle": [with_optimized_op_count(rows)]}
    for n in SUBSET_SIZES:
        if n < rows["family"].nunique():
            runs[f"families_{n}"] = list(family_subsets(rows, n, DRAWS))
    if extra:
        runs["with_extra"] = [select_rows(dataset.load([ROWS, *extra]), "cpu")]
    return runs


def run(extra: list[str]) -> dict:
    results = {}
    for name, draws in tqdm(corpora(extra).items(), desc="leave-one-family-out runs",
                            unit="run"):
        scores = [lofo_scores(rows) for rows in draws]
        results[name] = {key: float(np.mean([s[key] for s in scores])) for key in scores[0]}
        results[name].update(rows=round(results[name]["rows"]), families=scores[0]["families"])
        if len(scores) > 1:
            results[name]["spearman_draws"] = [round(s["spearman"], 4) for s in scores]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", nargs="*", default=[UNSHIPPED],
                        help="more CPU rows (shards or folders) for the with_extra run; "
                             "none: leave the run out")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    results = run(args.extra)
    print(f"{'run':22s} {'families':>8s} {'rows':>5s} {'median':>7s} {'p90':>6s} {'spearman':>8s}")
    for name, r in results.items():
        print(f"{name:22s} {r['families']:8d} {r['rows']:5d} {r['median_fold']:7.3f} "
              f"{r['p90_fold']:6.3f} {r['spearman']:8.4f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rows": ROWS, "extra": args.extra, "results": results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
