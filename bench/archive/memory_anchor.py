"""Does host memory's ceiling from compile time (`Anchor`) help on programs nobody here
wrote? Fits the shipped CPU recipe on the shipped rows with its anchors, with them but no
bytes held (`anchor_held=()`), and without them (`anchors={}`), each also with N random
real-program rows left out (noise draws), and scores host memory of every stored CPU bench
program that measured it (the failure-class programs too), overall, by measured compile
time and by bench. Fits only: about a minute a fit, no compile is timed.

    python bench/archive/memory_anchor.py --noise 31 --json bench/results/memory_anchor.json

Why: the memory model alone predicted 1.5-3.5 GB for bench programs of 20-30 s that used
0.5-1.4 GB, while real programs' memory follows their compile time closely. Bytes held:
a ceiling from compile time alone took two captured tables' product (101 MB) to 44 MB.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run from elsewhere too
from added_rows_effect import RESULTS, SHIPPED_ROWS, fit, without_random_real_rows  # noqa: E402

from costmodel.training.evaluation.outside import (  # noqa: E402
    current_results,
    measures,
    scaled_predictions,
)
from costmodel.training.store import dataset  # noqa: E402

# Measured compile seconds of the bins memory is scored by.
SIZE_BINS = ((0, 1), (1, 3), (3, 10), (10, 100))
RECIPES = {"anchored": {}, "no bytes held": {"anchor_held": ()}, "not anchored": {"anchors": {}}}
# Programs chosen for the ways the model failed, scored beside the benches' results.
FAILURE_CLASSES = Path(__file__).resolve().parents[1] / "data/failure_classes/score.json"


def scored_results() -> dict[str, dict]:
    """The stored CPU bench results of this schema, and the failure-class programs'."""
    return {**current_results(RESULTS, "cpu"),
            "failure_classes": json.loads(FAILURE_CLASSES.read_text())}


def memory_scores(model, results: dict[str, dict]) -> dict:
    """Host memory's mean log error (measured over predicted, of MB + 1), its mean |log|
    and 90% coverage, over every bench program that measured it, per `SIZE_BINS` and per
    bench."""
    seconds, logs, inside, bench = [], [], [], []
    for name, data in results.items():
        if not measures(data, "peak_rss_bytes"):
            continue
        point, lo, hi, measured = scaled_predictions(model, data, "peak_rss_bytes")
        seconds += [row["measured_s"] for row in data["results"]]
        bench += [name] * len(data["results"])
        logs += list(np.log((measured + 2**20) / (point + 2**20)))
        inside += list((lo <= measured) & (measured <= hi))
    seconds, logs, inside, bench = map(np.asarray, (seconds, logs, inside, bench))

    def summary(keep: np.ndarray) -> dict:
        return {"programs": int(keep.sum()), "mean_log": float(logs[keep].mean()),
                "mean_abs_log": float(np.abs(logs[keep]).mean()),
                "coverage_90": float(inside[keep].mean())}

    return {"all": summary(np.ones(len(logs), bool)),
            **{f"{lo}-{hi} s": summary((seconds >= lo) & (seconds < hi)) for lo, hi in SIZE_BINS},
            "by bench": {name: summary(bench == name) for name in sorted(set(bench))}}


def run(noise: int, draws: int = 3) -> dict:
    results = scored_results()
    shipped = dataset.load([SHIPPED_ROWS])
    datasets = {"shipped rows": shipped, **{
        f"{noise} random real rows out, draw {seed}": without_random_real_rows(shipped, noise, seed)
        for seed in range(draws if noise else 0)}}
    report: dict = {}
    with tempfile.TemporaryDirectory() as scratch:
        for data_name, rows in datasets.items():
            for recipe, params in RECIPES.items():
                model, _ = fit(rows, Path(scratch) / "fit", **params)
                anchor = model.predictor.targets["peak_rss_bytes"].anchor
                entry = {"anchor": None if anchor is None else vars(anchor),
                         "memory": memory_scores(model, results)}
                report.setdefault(data_name, {})[recipe] = entry
                print(f"{data_name:32s} {recipe:13s} memory mean |log| "
                      f"{entry['memory']['all']['mean_abs_log']:.3f}, 10-100 s "
                      f"{entry['memory']['10-100 s']['mean_abs_log']:.3f}, failure classes "
                      f"{entry['memory']['by bench']['failure_classes']['mean_abs_log']:.3f}, "
                      f"anchor {entry['anchor']}",
                      flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=int, default=0,
                        help="also fit 3 times leaving this many random real rows out")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = run(args.noise)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
