"""Would these measured rows make the shipped CPU model better on programs nobody here
wrote? Fits the shipped recipe on the shipped rows alone and with each named set of extra
rows added, and scores every fit on every stored CPU bench result of this feature schema
(`bench/results/*.json` with model inputs: the outside-libraries runs, the top end, the
library and unseen benches), as the model cards score the shipped model. Fits only: a
minute or so per set, no compile is timed.

Why: a new corpus library is training data, not the judge; rows that help the programs
they look like can cost others, and only the out-of-corpus benches tell which. It also
scores the shipped model on each added set's rows (programs it never trained on).

    python bench/archive/added_rows_effect.py --add jaxsim=bench/data/cpu_unshipped_real.parquet:jaxsim \
        --json bench/results/added_rows_effect.json

A set is `NAME=PATH[:LIBRARY,...]` (rows of those libraries only, or all rows of PATH).
`--noise N` adds three fits that each leave N random real-program rows out of the shipped
ones: how far the scores move when the data changes by that much for no reason.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models import load, load_default
from costmodel.training.evaluation import metrics
from costmodel.training.evaluation.interval_widening import with_shipped_widening
from costmodel.training.evaluation.outside import current_results, measures, score, speed_scale
from costmodel.training.fitting.fit import features_frame, select_rows, train
from costmodel.training.fitting.publish import save
from costmodel.training.store import dataset

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_ROWS = ROOT / "training/data/cpu/rows.parquet"
RESULTS = ROOT / "bench/results"


def extra_rows(spec: str) -> tuple[str, pd.DataFrame]:
    """`NAME=PATH[:LIB,LIB]` as (name, the rows it names)."""
    name, _, where = spec.partition("=")
    path, _, libraries = where.partition(":")
    if not name or not path:
        raise SystemExit(f"--add {spec!r}: expected NAME=PATH[:LIBRARY,...]")
    rows = dataset.load([path])
    if libraries:
        rows = rows[rows["library"].isin(libraries.split(","))]
    if rows.empty:
        raise SystemExit(f"--add {spec!r}: no rows")
    return name, rows


def fit(rows: pd.DataFrame, folder: Path, **params):
    """The shipped recipe (with `params` changed) fitted on `rows`, its intervals widened
    as the shipped model's, saved in `folder` and loaded back (benches scale by the
    artifact's reference time)."""
    rows = select_rows(rows, "cpu", "")
    predictor, widening = with_shipped_widening(train(rows, "cpu", "", **params), "cpu", "")
    save(predictor, folder, backend="cpu", target="", data=rows,
         metrics={"interval_widening": widening}, name=folder.name)
    return load(folder), len(rows)


def bench_scores(model, results: dict[str, dict]) -> dict:
    """Per bench and over all of them: mean |log| fold of compile seconds (the figure the
    decision rests on), median fold, 90% coverage, and host memory's mean |log| fold."""
    per_bench, time_logs, memory_logs = {}, [], []
    for name, data in results.items():
        timed = score(model, data)
        logs = np.log(timed["folds"])
        time_logs += list(logs)
        entry = {"programs": timed["n"], "mean_abs_log": float(logs.mean()),
                 "median_fold": timed["median_fold"], "coverage_90": timed["coverage"]}
        if measures(data, "peak_rss_bytes"):
            memory = np.log(score(model, data, "peak_rss_bytes")["folds"])
            memory_logs += list(memory)
            entry["memory_mean_abs_log"] = float(memory.mean())
        per_bench[name] = entry
    return {"benches": per_bench,
            "all": {"programs": len(time_logs), "mean_abs_log": float(np.mean(time_logs)),
                    "median_fold": float(np.exp(np.median(time_logs))),
                    "memory_mean_abs_log": float(np.mean(memory_logs))}}


def row_predictions(model, rows: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """`model`'s compile seconds (point, lo, hi) for dataset rows, each scaled by its
    row's reference compile as `costmodel calibrate` would scale it."""
    predicted = model.predict(features_frame(rows).to_dict("records"))["compile_seconds"]
    scale = np.array([speed_scale(model, ref) for ref in rows["ref_seconds"].astype(float)])
    return tuple(predicted[k] * scale for k in ("point", "lo", "hi"))


def unseen_rows_scores(model, rows: pd.DataFrame) -> dict:
    """`model` (one that never trained on `rows`) on them, per family (`row_predictions`)."""
    rows = select_rows(rows, "cpu", "").reset_index(drop=True)
    point, lo, hi = row_predictions(model, rows)
    measured = rows["compile_seconds"].to_numpy(float)
    groups = {family: group.index.to_numpy() for family, group in rows.groupby("family")}
    return {name: {"programs": len(i), "median_fold": metrics.median_fold(point[i], measured[i]),
                   "measured_over_predicted": float(np.median(measured[i] / point[i])),
                   "coverage_90": metrics.coverage(lo[i], hi[i], measured[i])}
            for name, i in {**groups, "all": np.arange(len(rows))}.items()}


def without_random_real_rows(rows: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """`rows` less `n` real-program rows drawn at random (synthetic rows all kept)."""
    real = np.flatnonzero(rows["library"].fillna("").to_numpy() != "")
    return rows.drop(rows.index[np.random.default_rng(seed).choice(real, n, replace=False)])


def run(additions: list[str], noise: int = 0, draws: int = 3) -> dict:
    results = current_results(RESULTS, "cpu")
    shipped = dataset.load([SHIPPED_ROWS])
    fits, unseen = {"shipped rows": shipped}, {}
    for spec in additions:
        name, rows = extra_rows(spec)
        fits[name] = pd.concat([shipped, rows], ignore_index=True)
        unseen[name] = unseen_rows_scores(load_default("cpu"), rows)
        print(f"the shipped model on {name}'s rows: " + ", ".join(
            f"{family} {s['median_fold']:.2f} (measured / predicted {s['measured_over_predicted']:.2f})"
            for family, s in unseen[name].items()), flush=True)
    for seed in range(draws if noise else 0):
        fits[f"{noise} random real rows out, draw {seed}"] = without_random_real_rows(
            shipped, noise, seed)
    report = {}
    with tempfile.TemporaryDirectory() as scratch:
        for i, (name, rows) in enumerate(fits.items()):
            model, n = fit(rows, Path(scratch) / f"fit{i}")
            report[name] = {"training_rows": n, **bench_scores(model, results)}
            _print_overall(name, report[name])
    _print_benches(report, results)
    return {**report, "shipped model on the added rows": unseen}


def _print_overall(name: str, entry: dict) -> None:
    overall = entry["all"]
    print(f"{name:28s} {entry['training_rows']:5d} rows: mean |log| {overall['mean_abs_log']:.3f}, "
          f"median fold {overall['median_fold']:.3f}, memory {overall['memory_mean_abs_log']:.3f} "
          f"over {overall['programs']} programs", flush=True)


def _print_benches(report: dict, results: dict) -> None:
    print(f"{'bench':26s}" + "".join(f"{name[:20]:>22s}" for name in report))
    for bench in results:
        cells = (report[name]["benches"][bench] for name in report)
        print(f"{bench:26s}" + "".join(
            f"{cell['mean_abs_log']:>15.3f} c{cell['coverage_90']:.2f}" for cell in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--add", nargs="*", default=[], help="NAME=PATH[:LIBRARY,...]")
    parser.add_argument("--noise", type=int, default=0,
                        help="also fit 3 times leaving this many random real rows out")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = run(args.add, args.noise)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
