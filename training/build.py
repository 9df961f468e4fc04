"""One call from dataset rows to a saved model: train, evaluate, save (and for the shipped
defaults, plots and the model card). It sits above the rooms it joins."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from costmodel.features import Placement
from costmodel.models import Artifact, default_path, load
from costmodel.models.novelty import WIDENED_TARGETS, Novelty, Widening

from .evaluation import by_placement, plots
from .evaluation.evaluate import evaluate, run_evaluation, with_keys
from .evaluation.interval_widening import (
    bench_ratios,
    corpus_ratios,
    fit_widening,
    unwidened,
    widen,
    with_shipped_widening,
)
from .evaluation.model_card import write_card
from .fitting.fit import features_frame, select_rows, train
from .fitting.publish import save
from .store import dataset


def retrain(data: pd.DataFrame, backend: str, target: str, out: Path, name: str,
            params: dict | None = None) -> Artifact:
    """Fit, evaluate (leave-one-family-out) and save an artifact at `out`, in minutes; its
    intervals widened as the shipped model's were (`with_shipped_widening`).

    `params` override `CompileCostModel` arguments (e.g. `max_iter`) for both.
    """
    rows = select_rows(data, backend, target)
    estimator = train(rows, backend, target, **(params or {}))
    metrics = evaluate(rows, backend, target, splits=("leave_family_out",),
                       models=("costmodel",), params=params)
    predictor, widening = with_shipped_widening(estimator, backend, target)
    return save(predictor, out, backend=backend, target=target, data=rows,
                metrics={**metrics, "interval_widening": widening}, name=name)


def build_default(data_paths: Sequence[str | Path], backend: str = "cpu", target: str = "",
                  out: Path | None = None, jobs: int = 1,
                  outside_results: Path | None = None,
                  predictions_out: Path | None = None) -> Artifact:
    """Train on the named data, evaluate, and write the shipped model with plots and card.

    Writes to `costmodel.models.default_path(backend, target)` unless `out` is given;
    `jobs` processes fit the evaluation's folds; the benches' stored out-of-corpus programs
    in `outside_results` widen the intervals (`interval_widening`) and the card scores the
    model on them; `predictions_out` (a parquet file)
    keeps the evaluation's held-out predictions, each with its row's `key`
    (`bench/evaluations/cross_machine.py` scores them against another machine's measurements).

    Example:
        >>> build_default(["training/data/cpu/rows.parquet"], "cpu",
        ...               outside_results=Path("bench/results"))
    """
    rows = select_rows(dataset.load(list(data_paths)), backend, target)
    out = Path(out) if out is not None else default_path(backend, target)
    result = run_evaluation(rows, backend, target, jobs=jobs)
    if predictions_out is not None:
        with_keys(result.predictions, rows).to_parquet(predictions_out)
    # a TPU chip's rows may hold sharded programs: scored apart from one-chip ones too
    report = dict(result.report)
    if by_chips := by_placement.scores(with_keys(result.predictions, rows), rows):
        report["by_placement"] = by_chips
    estimator = train(rows, backend, target)
    name = f"costmodel-{out.name}"
    artifact = save(estimator, out, backend=backend, target=target, data=rows,
                    metrics=report, name=name)
    artifact, report = _widened(artifact, rows, report, outside_results,
                                with_keys(result.predictions, rows))
    figures = plots.write_all(result.predictions, rows, estimator, out) + _widening_figure(
        out, backend, target)
    write_card(out / "MODEL_CARD.md", artifact.manifest, report, rows, figures, artifact,
               outside_results)
    return artifact


def refresh_widening(path: Path, data_paths: Sequence[str | Path], outside_results: Path,
                     predictions: Path | None = None) -> Artifact:
    """Refit the interval widening of the model saved at `path` (trained on `data_paths`)
    from the bench runs stored in `outside_results`, and rewrite its card, without
    retraining: after a bench run adds programs, the predictor stays as it was but for its
    intervals. The card's plots are the ones already in `path`; `predictions`
    (`build_default`'s `predictions_out` of this model) let the widening grow with a
    program's distance from the training rows, kept within what the corpus's libraries
    held out allow (without them, one factor). A model saved without its training rows'
    distances gets them from `data_paths`."""
    artifact = load(path)
    report = dict(artifact.manifest["metrics"])
    report.pop("interval_widening", None)
    backend, target = artifact.backend, artifact.target
    rows = select_rows(dataset.load(list(data_paths)), backend, target)
    predictor = artifact.predictor
    if predictor.novelty is None:
        predictor = replace(predictor, novelty=Novelty.of(features_frame(rows).to_numpy(float)))
    artifact, report = _widened(replace(artifact, predictor=predictor), rows, report,
                                outside_results,
                                None if predictions is None else pd.read_parquet(predictions))
    figures = plots.figure_paths(path, Placement(backend, target).label) + _widening_figure(
        path, backend, target)
    write_card(Path(path) / "MODEL_CARD.md", artifact.manifest, report, rows, figures,
               artifact, outside_results)
    return artifact


def _widening_figure(folder: Path, backend: str, target: str) -> list[Path]:
    """The widenings' figures in `folder` that `_widened` drew."""
    label = Placement(backend, target).label
    paths = [plots.widening_figure_path(folder, label, quantity) for quantity in WIDENED_TARGETS]
    return [path for path in paths if path.exists()]


def _widened(artifact: Artifact, rows: pd.DataFrame, report: dict,
             outside_results: Path | None, predictions: pd.DataFrame | None
             ) -> tuple[Artifact, dict]:
    """`artifact` saved with each quantity's interval widened as the benches' stored runs
    that measured it ask (`interval_widening.fit_widening`; unwidened without stored runs),
    and the report with the widenings in it. `predictions` (the evaluation's, with keys)
    bound how far the corpus's libraries held out may be covered."""
    artifact = unwidened(artifact)
    label = Placement(artifact.backend, artifact.target).label
    fitted, rules = {}, {}
    for quantity in WIDENED_TARGETS:
        figure = plots.widening_figure_path(artifact.path, label, quantity)
        figure.unlink(missing_ok=True)  # a figure of an earlier widening would mislead
        if outside_results is None:
            continue
        bench = bench_ratios(artifact, outside_results, artifact.backend, artifact.target,
                             quantity)
        corpus = None if predictions is None else corpus_ratios(predictions, rows, quantity)
        widening = fit_widening(bench, corpus)
        if widening is not None:
            fitted[quantity], rules[quantity] = widening, Widening.from_dict(widening)
            plots.interval_widening(bench, corpus, rules[quantity], figure, label, quantity)
    if fitted:
        report = {**report, "interval_widening": fitted}
    artifact = save(widen(artifact.predictor, rules), artifact.path,
                    backend=artifact.backend, target=artifact.target, data=rows,
                    metrics=report, name=artifact.manifest["name"])
    return artifact, report


def main(argv: Sequence[str] | None = None) -> int:
    """Build a shipped default model: `python -m costmodel.training.build
    training/data/cpu/rows.parquet --outside-results bench/results` (the benches' stored
    runs widen its intervals and score it on its card; the library reads no bench folder
    of its own)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m costmodel.training.build",
                                     description=main.__doc__.split("\n")[0])
    parser.add_argument("data", nargs="+", help="dataset rows (parquet or jsonl)")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--target", default="")
    parser.add_argument("--out", type=Path, help="default: the shipped model's folder")
    parser.add_argument("--outside-results", type=Path,
                        help="a folder of stored bench results (bench/results in a checkout)")
    parser.add_argument("--predictions-out", type=Path)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    artifact = build_default(args.data, args.backend, args.target, out=args.out, jobs=args.jobs,
                             outside_results=args.outside_results,
                             predictions_out=args.predictions_out)
    print(f"wrote {artifact.path} (version {artifact.version})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
