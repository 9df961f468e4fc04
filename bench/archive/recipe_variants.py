"""Does another CPU recipe predict the outside suites better? Each variant is fitted on
the shipped CPU rows and scored on every stored CPU bench run that keeps its calibration,
calibrated as `costmodel calibrate` would calibrate that fit (its own model ratio on the
run's calibration set, `calibrate.applied`). Compiles nothing; a fit takes 10-20 s.

    python bench/archive/recipe_variants.py while_count base:hlo_ops_inlined [--ensemble] [--json OUT]

A variant is `a+b` (counts added to the compile-time `ADDED_TERMS`), `base:a+b` (the
compile-time baseline's size terms instead of `BASELINE_TERMS`') or `trees-skip:a+b`
(more inputs the trees do not read). `--ensemble` also scores the geometric mean of all
the fits' predictions. Printed per variant: pooled median fold, p90 and mean |log error|;
the same with each run's mean log error removed (shape); the share inside the unwidened
90% interval; then each run's median fold, p90 and geometric-mean measured / predicted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import numpy as np
from outside_ceiling import with_count

from costmodel.training.evaluation.outside import CALIBRATION_KEY as CALIBRATION
from costmodel.training.evaluation.outside import current_results, stored_inputs
from costmodel.training.fitting import recipe
from costmodel.training.fitting.fit import train
from costmodel.training.measure.calibrate import (
    MODEL_RATIO,
    applied,
    model_ratio_scale,
    predicted_set,
)
from costmodel.training.store import dataset

ROOT = Path(__file__).resolve().parents[2]


def params_of(variant: str) -> dict:
    """`train` keywords of one variant's text (see the module's docstring)."""
    kind, _, names = variant.rpartition(":")
    names = tuple(names.split("+"))
    if kind == "base":
        return {"baseline_terms": {"compile_seconds": names}}
    if kind == "trees-skip":
        return {"tree_exclude": recipe.BACKEND_TERMS["cpu"]["tree_exclude"] + names}
    if kind:
        raise ValueError(f"unknown variant kind {kind!r} in {variant!r}")
    return {"added_terms": {"compile_seconds": recipe.ADDED_TERMS["compile_seconds"] + names}}


class Ensemble:
    """The geometric mean of several predictors' compile-time outputs."""

    def __init__(self, predictors: list) -> None:
        self.predictors = predictors

    def predict(self, inputs: list[dict]) -> dict:
        outs = [p.predict(inputs)["compile_seconds"] for p in self.predictors]
        return {"compile_seconds": {key: np.exp(np.mean([np.log(o[key]) for o in outs], axis=0))
                                    for key in ("point", "lo", "hi")}}


def score(predictor, runs: dict[str, dict]) -> dict:
    """Pooled and per-run figures of one predictor on the stored runs."""
    errors, shapes, inside, by_run = [], [], [], {}
    for name, data in runs.items():
        calibration = {program: {**figures, "model_inputs": with_count(figures["model_inputs"])}
                       for program, figures in data[CALIBRATION].items()}
        scale = applied(MODEL_RATIO, model_ratio_scale(
            calibration, predicted_set(calibration, predictor)))
        out = predictor.predict([with_count(x) for x in stored_inputs(data)])["compile_seconds"]
        measured = np.array([row["measured_s"] for row in data["results"]])
        error = np.log(measured / (out["point"] * scale))
        errors += list(error)
        shapes += list(error - error.mean())
        inside += list((measured >= out["lo"] * scale) & (measured <= out["hi"] * scale))
        size = np.abs(error)
        by_run[name] = {"median_fold": float(np.exp(np.median(size))),
                        "p90_fold": float(np.exp(np.quantile(size, 0.9))),
                        "measured_over_predicted": float(np.exp(error.mean()))}
    size, shape = np.abs(errors), np.abs(shapes)
    return {"programs": len(size), "median_fold": float(np.exp(np.median(size))),
            "p90_fold": float(np.exp(np.quantile(size, 0.9))), "mean_abs_log": float(size.mean()),
            "shape_median_fold": float(np.exp(np.median(shape))),
            "shape_mean_abs_log": float(shape.mean()), "covered_unwidened": float(np.mean(inside)),
            "by_run": by_run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*")
    parser.add_argument("--ensemble", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = dataset.load(ROOT / "training/data/cpu/rows.parquet")
    runs = {name: data for name, data in current_results(ROOT / "bench/results", "cpu").items()
            if CALIBRATION in data}
    fitted = {"as shipped": train(rows, "cpu").predictor_}
    for variant in args.variants:
        fitted[variant] = train(rows, "cpu", **params_of(variant)).predictor_
    if args.ensemble:
        fitted["ensemble"] = Ensemble(list(fitted.values()))
    out = {}
    for label, predictor in fitted.items():
        got = out[label] = score(predictor, runs)
        print(f"{label:32s} median {got['median_fold']:.3f}  p90 {got['p90_fold']:.3f}  "
              f"mean |log| {got['mean_abs_log']:.3f}  shape {got['shape_median_fold']:.3f} / "
              f"{got['shape_mean_abs_log']:.3f}  covered {got['covered_unwidened']:.0%}  "
              f"({got['programs']} programs)")
        print("    " + "  ".join(f"{run}: {v['median_fold']:.2f}/{v['p90_fold']:.2f}/"
                                 f"{v['measured_over_predicted']:.2f}"
                                 for run, v in got["by_run"].items()))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
