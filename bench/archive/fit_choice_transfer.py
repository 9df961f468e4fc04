"""Does a fit that scores better with the corpus's libraries held out also score better on
programs of libraries no corpus family uses? For a grid of the trees' settings, fits the
shipped CPU recipe held out by library (`leave_library_out`, the corpus's real rows) and on
all rows, and scores the latter on every stored CPU bench result (`added_rows_effect.
bench_scores`: the outside-libraries runs, the top end, the library and unseen benches).
Reports each setting's two scores and their rank correlation over the grid, then refits the
shipped setting and the one the benches score best with `--noise` random real rows left out
(six draws): whether that best is better or one lucky fit. Fits only, no compile is timed;
about 30 minutes on two processes.

    python bench/archive/fit_choice_transfer.py --jobs 2 --noise 31 \\
        --json bench/results/fit_choice_transfer.json

Why: the issue's bars are set on the library-held-out split, and a setting chosen there is
only worth shipping if the choice carries to libraries nobody here has used.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import added_rows_effect  # noqa: E402

from costmodel.models.artifact import Artifact  # noqa: E402
from costmodel.training.evaluation import evaluate, metrics  # noqa: E402
from costmodel.training.evaluation.outside import current_results  # noqa: E402
from costmodel.training.fitting.fit import select_rows, train  # noqa: E402
from costmodel.training.store import dataset  # noqa: E402

# The shipped setting is one of the grid's (`CompileCostModel`'s defaults).
GRID = {"min_samples_leaf": (10, 20, 40), "max_leaf_nodes": (7, 15, 31),
        "boosting": ((100, 0.1), (200, 0.05), (50, 0.1)), "l2_regularization": (1.0, 10.0)}
SHIPPED = {"min_samples_leaf": 10, "max_leaf_nodes": 15, "max_iter": 100, "learning_rate": 0.1,
           "l2_regularization": 1.0}


def settings() -> list[dict]:
    """Every combination of `GRID`, as `CompileCostModel` arguments."""
    return [{"min_samples_leaf": leaf, "max_leaf_nodes": nodes, "max_iter": iters,
             "learning_rate": rate, "l2_regularization": l2}
            for leaf, nodes, (iters, rate), l2 in itertools.product(*GRID.values())]


def in_memory(estimator) -> Artifact:
    """A fitted estimator as the benches' scoring reads an artifact (points only: it was
    fitted without interval folds)."""
    predictor = estimator.predictor
    return Artifact(path=Path("."), predictor=predictor,
                    manifest={"reference_seconds": predictor.reference_seconds,
                              "targets": list(predictor.targets)})


def library_held_out(rows, setting: dict, jobs: int) -> dict:
    """Mean |log| error of compile seconds and host memory, each library held out."""
    pred = evaluate.predictions(rows, "leave_library_out", models=("costmodel",),
                                params={**setting, "n_folds": 0}, jobs=jobs)
    out = {}
    for target in ("compile_seconds", "peak_rss_bytes"):
        chosen = pred[pred["target"] == target]
        offset = evaluate.LOG_OFFSETS[target]
        logs = np.log(metrics.fold_errors(chosen["point"] + offset, chosen["actual"] + offset))
        out[target] = float(np.mean(logs))
    return out


def bench_scores(rows, setting: dict, results: dict) -> dict:
    """The setting fitted on `rows`, scored on the stored benches: per bench and over all."""
    scores = added_rows_effect.bench_scores(
        in_memory(train(rows, "cpu", "", n_folds=0, **setting)), results)
    return {"benches": {name: entry["mean_abs_log"] for name, entry in scores["benches"].items()},
            "all_benches": {"compile_seconds": scores["all"]["mean_abs_log"],
                            "peak_rss_bytes": scores["all"]["memory_mean_abs_log"]}}


def run(jobs: int = 1, grid: list[dict] | None = None, noise: int = 0, draws: int = 6) -> dict:
    rows = select_rows(dataset.load([added_rows_effect.SHIPPED_ROWS]), "cpu", "")
    results = current_results(added_rows_effect.RESULTS, "cpu")
    records = []
    for setting in grid or settings():
        record = {"setting": setting, "library_held_out": library_held_out(rows, setting, jobs),
                  **bench_scores(rows, setting, results)}
        records.append(record)
        print(json.dumps(record["setting"]), record["library_held_out"], record["all_benches"],
              flush=True)
    report = {"settings": records, "correlation": correlations(records)}
    if noise:
        best = min(records, key=lambda r: r["all_benches"]["compile_seconds"])["setting"]
        report["noise"] = {"rows_left_out": noise, "best_on_benches": best, "draws": [
            {name: bench_scores(added_rows_effect.without_random_real_rows(rows, noise, seed),
                                setting, results)["all_benches"]
             for name, setting in (("shipped", SHIPPED), ("best_on_benches", best))}
            for seed in range(draws)]}
    return report


def correlations(records: list[dict]) -> dict:
    """Spearman over the settings between the library-held-out score and each bench's."""
    held = {t: [r["library_held_out"][t] for r in records]
            for t in ("compile_seconds", "peak_rss_bytes")}
    out = {f"all_benches_{t}": metrics.spearman(held[t], [r["all_benches"][t] for r in records])
           for t in held}
    for name in records[0]["benches"]:
        out[name] = metrics.spearman(held["compile_seconds"],
                                     [r["benches"][name] for r in records])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="processes for the held-out fits")
    parser.add_argument("--noise", type=int, default=0,
                        help="refit the shipped and the benches' best setting with this many "
                             "random real rows left out, six times")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = run(args.jobs, noise=args.noise)
    for name, rho in report["correlation"].items():
        print(f"{name:40s} Spearman with the library-held-out score {rho:+.2f}")
    for draw in report.get("noise", {}).get("draws", []):
        print("rows left out: " + ", ".join(
            f"{name} {scores['compile_seconds']:.3f}" for name, scores in draw.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
