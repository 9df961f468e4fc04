"""Which programs fall outside the 90% interval, by their distance from the training rows.

    python bench/evaluations/interval_novelty.py --predictions PREDS.parquet [--target h100]

For the shipped model of the backend (CPU, or the deviceless H100 with `--target h100`),
with its compile-time interval as the held-out residuals set it (unwidened), this scores:
- the stored bench programs (`bench/results`, no training row holds them) and the corpus's
  libraries held out (the `leave_library_out` predictions of an evaluation of the same
  recipe: `build_default(..., predictions_out=PREDS.parquet)` writes them), each program's
  miss ratio (|log error| / interval log offset: inside at <= 1) and its distance from the
  training rows (`costmodel.models.novelty`; a corpus row's from the other libraries' rows);
- coverage by fifth of distance, and how the miss ratio ranks with distance (Spearman);
- three widening rules, each with the bench coverage when each library is scored against a
  rule fitted without it, the corpus's coverage and the mean growth of the log width: one
  factor for all (fitted without the corpus), the shipped rule (grows with distance, never
  narrower than fitted, kept within 85-95% on the corpus), and the same family allowed to
  narrow near programs' intervals (no floor; computed here only).

Writes `bench/data/novelty/ratios_LABEL.csv` and `summary_LABEL.json`. Compiles nothing;
seconds to run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from costmodel.features import Placement
from costmodel.models import load_default
from costmodel.training.evaluation import interval_widening as widening
from costmodel.training.fitting.fit import select_rows
from costmodel.training.store import dataset

ROOT = Path(__file__).resolve().parents[2]
DATA = {"": ROOT / "training/data/cpu/rows.parquet",
        "h100": ROOT / "training/data/gpu-h100/rows.parquet"}


def by_distance_fifth(ratios: pd.DataFrame) -> list[dict]:
    """Coverage and 90th percentile of the miss ratio per fifth of all programs' distances,
    for the corpus and the benches apart."""
    edges = np.quantile(ratios["distance"], np.linspace(0, 1, 6))
    fifth = np.clip(np.searchsorted(edges, ratios["distance"], side="right") - 1, 0, 4)
    out = []
    for index in range(5):
        for source, part in ratios[fifth == index].groupby("source"):
            out.append({"fifth": index + 1, "distance": [float(edges[index]),
                                                         float(edges[index + 1])],
                        "source": source, "n": len(part),
                        "coverage": float((part["ratio"] <= 1).mean()),
                        "ratio_p90": float(part["ratio"].quantile(0.9))})
    return out


def free_scale(rule: tuple[float, float, float], distance) -> np.ndarray:
    """The shipped family's scale without its floor at 1 (near programs may narrow)."""
    factor, onset, power = rule
    return factor * np.maximum(1.0, np.asarray(distance, float) / onset) ** power


def fit_free(bench: pd.DataFrame, corpus: pd.DataFrame) -> tuple[float, float, float]:
    """`interval_widening.fit_rule`'s search with `free_scale`."""
    distance = bench["distance"].to_numpy(float)
    best, best_key = None, None
    for q in widening.ONSET_QUANTILES:
        for power in widening.POWERS:
            onset = float(np.quantile(distance, q))
            shape = free_scale((1.0, onset, power), distance)
            factor = widening.library_quantile(bench["ratio"] / shape, bench["library"])
            rule = (factor, onset, power)
            covered = float((corpus["ratio"] <= free_scale(rule, corpus["distance"])).mean())
            low, high = widening.CORPUS_COVERAGE
            key = (max(low - covered, covered - high, 0.0), free_scale(rule, distance).mean())
            if best_key is None or key < best_key:
                best, best_key = rule, key
    return best


def _free_scale_of(rule: tuple[float, float, float]):
    return lambda distance: free_scale(rule, distance)


def rule_scores(bench: pd.DataFrame, corpus: pd.DataFrame) -> dict[str, dict]:
    """The three rules (module docstring): each library's bench programs against a rule
    fitted without them, the corpus, and the mean growth of the log width."""
    library = bench["library"].to_numpy()
    fits = {
        "one factor": lambda part: widening.fit_rule(part).scale,
        "shipped (grows with distance, floor 1)": lambda part: widening.fit_rule(
            part, corpus).scale,
        "no floor": lambda part: _free_scale_of(fit_free(part, corpus)),
    }
    out = {}
    for name, fit in fits.items():
        covered = np.zeros(len(bench), bool)
        for held in np.unique(library):
            mine = library == held
            covered[mine] = bench["ratio"][mine] <= fit(bench[~mine])(bench["distance"][mine])
        scale = fit(bench)
        out[name] = {"bench_held_out": float(covered.mean()),
                     "corpus": float((corpus["ratio"] <= scale(corpus["distance"])).mean()),
                     "mean_scale_bench": float(np.mean(scale(bench["distance"]))),
                     "mean_scale_corpus": float(np.mean(scale(corpus["distance"])))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--predictions", type=Path, required=True,
                        help="an evaluation's held-out predictions with keys (parquet)")
    parser.add_argument("--target", default="", choices=["", "h100"])
    args = parser.parse_args()
    backend = "gpu" if args.target else "cpu"
    artifact = widening.unwidened(load_default(backend, args.target))
    rows = select_rows(dataset.load([DATA[args.target]]), backend, args.target)
    bench = widening.bench_ratios(artifact, ROOT / "bench/results", backend, args.target)
    corpus = widening.corpus_ratios(pd.read_parquet(args.predictions), rows)
    ratios = pd.concat([bench.assign(source="benches"),
                        corpus.assign(source="corpus libraries held out", bench="")])
    label = Placement(backend, args.target).label
    out = ROOT / "bench/data/novelty"
    out.mkdir(parents=True, exist_ok=True)
    ratios.to_csv(out / f"ratios_{label}.csv", index=False, float_format="%.5g")
    summary = {
        "model": load_default(backend, args.target).version,
        "programs": {"benches": len(bench), "corpus": len(corpus)},
        "spearman_ratio_distance": {
            source: float(spearmanr(part["ratio"], part["distance"]).statistic)
            for source, part in ratios.groupby("source")},
        "by_distance_fifth": by_distance_fifth(ratios),
        "rules": rule_scores(bench, corpus)}
    (out / f"summary_{label}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("spearman_ratio_distance", "rules")}, indent=1))
    for line in summary["by_distance_fifth"]:
        print(f"fifth {line['fifth']} d {line['distance'][0]:.1f}-{line['distance'][1]:.1f} "
              f"{line['source']:28s} n {line['n']:3d}  coverage {line['coverage']:.2f}  "
              f"p90 ratio {line['ratio_p90']:.2f}")


if __name__ == "__main__":
    main()
