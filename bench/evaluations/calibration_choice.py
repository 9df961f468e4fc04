"""Which way of calibrating carries the model to a machine with the least bias? Recomputed
from stored runs; nothing is compiled.

A stored run counts where both are known: `costmodel calibrate` records taken on a machine
(each program of the calibration set timed there) and programs the model never trained on,
measured on that machine beside them, with their uncalibrated predictions:

- `bench/data/cross_machine_amd*/`: 94 real programs on an AMD EPYC, predicted by models
  fitted on the Intel Xeon's rows with each program's library held out (the build's
  held-out predictions, `cross_machine_amd/heldout.parquet`); 2-3 calibrations a pass;
- `bench/data/outside_libraries*/`, `outside_top*/`, `failure_classes/`: programs of
  libraries no training row uses (and the failure classes' probes), predicted by the
  shipped model from their stored model inputs; a calibration before and one after.

For each calibration: every candidate `calibrate.candidates` gives (the model's predictions
of the set from the features of its training rows, as `costmodel calibrate` predicts them
from the features its processes extract), the factor the run needed (geometric mean of
measured over uncalibrated predicted seconds), and each estimator's bias: its factor over
the needed one (above 1: over-predicted). An estimator with a fitted parameter is fitted
(least squares in log bias) on the other runs' calibrations and scored on the run left
out, all of that run's calibrations together. The 90% intervals' coverage is given for the
applied way, as fitted and widened by the calibration's uncertainty.

    python bench/evaluations/calibration_choice.py [--json bench/results/calibration_choice.json]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models import load_default
from costmodel.models.calibration import widen_interval
from costmodel.training.corpus.calibration import FAMILY
from costmodel.training.evaluation.outside import stored_inputs
from costmodel.training.fitting.fit import features_frame, select_rows
from costmodel.training.measure.calibrate import (
    CALIBRATION_SET,
    MODEL_RATIO,
    REFERENCE_ONLY,
    REFERENCE_SPEED,
    candidate_spread,
    candidates,
    choose_scale,
    log_uncertainty,
    part_scales,
)

ROOT = Path(__file__).resolve().parents[2]  # the repository
DATA = ROOT / "training" / "data" / "cpu" / "rows.parquet"
HELDOUT = ROOT / "bench/data/cross_machine_amd/heldout.parquet"
# cross-machine passes: (folder of the run, its score) and the calibrations taken
CROSS = {"cross_machine": "cross_machine_amd", "cross_machine_pass2": "cross_machine_amd_pass2",
         "cross_machine_pass3": "cross_machine_amd_pass3",
         "cross_machine_pass4": "cross_machine_amd_pass4"}
CROSS_CALIBRATIONS = ("before", "after", "three_rounds")
# outside runs: (folder of the run, the stored result with model inputs)
OUTSIDE = {name: (name, f"bench/results/{name}.json") for name in (
    "outside_libraries", "outside_libraries_pass2", "outside_libraries_b1",
    "outside_libraries_b2", "outside_top", "outside_top_baseline")}
OUTSIDE["failure_classes"] = ("failure_classes", "bench/data/failure_classes/score.json")

PARTS = ("hlo", "backend", "other")


def set_predictions(artifact) -> dict[str, float]:
    """The model's compile seconds for each calibration program, from its training row's
    features (the latest one per program)."""
    rows = select_rows(pd.read_parquet(DATA), "cpu")
    rows = rows[rows["family"] == FAMILY].sort_values("measured_at")
    points = artifact.predict(features_frame(rows).to_dict("records"))["compile_seconds"]["point"]
    return {json.loads(params)["program"]: float(p) for params, p in zip(rows["params"], points)}


def record_candidates(record: Mapping, manifest: Mapping, predicted: Mapping[str, float]
                      ) -> dict[str, float]:
    """Every candidate of one stored record, against `manifest`'s training figures (the
    shipped model's; every record here holds the same), plus the part factors and the
    reference speed without the model's power."""
    here = {p: f["here"] for p, f in record["programs"].items()}
    training = manifest["calibration_set"]
    ways = candidates(here, training, manifest, predicted)
    _, parts = part_scales(here, training)
    speed = ways[REFERENCE_SPEED] ** (1 / manifest["reference_power"])
    return {**ways, "reference_speed_power_1": speed,
            **{f"part_{k}": v for k, v in (parts or {}).items()}}


def _interval(point, lo, hi, measured, scale, uncertainty) -> dict:
    widened = np.array([widen_interval(p * scale, a * scale, b * scale, uncertainty)
                        for p, a, b in zip(point, lo, hi)])
    inside = lambda low, high: float(np.mean((measured >= low) & (measured <= high)))  # noqa: E731
    return {"as_fitted": inside(lo * scale, hi * scale),
            "widened": inside(widened[:, 0], widened[:, 1])}


def cases(artifact) -> list[dict]:
    """One case per stored calibration: run, which calibration, candidates, the factor
    the run needed, and what the intervals need to score coverage."""
    predicted = set_predictions(artifact)
    manifest = artifact.manifest
    out = []
    heldout = pd.read_parquet(HELDOUT)
    heldout = heldout[(heldout["model"] == "costmodel") & (heldout["split"] == "leave_library_out")
                      & (heldout["target"] == "compile_seconds")].set_index("key")
    for run, folder in CROSS.items():
        rows = json.loads((ROOT / f"bench/results/{run}.json").read_text())["rows"]
        keys = [r["key"] for r in rows]
        programs = {"point": heldout.loc[keys, "point"].to_numpy(float),
                    "lo": heldout.loc[keys, "lo"].to_numpy(float),
                    "hi": heldout.loc[keys, "hi"].to_numpy(float),
                    "measured": np.array([r["here"] for r in rows], float)}
        for which in CROSS_CALIBRATIONS:
            path = ROOT / "bench/data" / folder / f"calibration_{which}.json"
            if path.exists():
                out.append(_case(run, which, json.loads(path.read_text()), programs,
                                 manifest, predicted))
    for run, (folder, result) in OUTSIDE.items():
        data = json.loads((ROOT / result).read_text())
        seconds = artifact.predict(stored_inputs(data))["compile_seconds"]
        programs = {**{k: np.asarray(seconds[k], float) for k in ("point", "lo", "hi")},
                    "measured": np.array([row["measured_s"] for row in data["results"]])}
        for which in ("before", "after"):
            record = json.loads((ROOT / "bench/data" / folder / f"calibration_{which}.json")
                                .read_text())
            out.append(_case(run, which, record, programs, manifest, predicted))
    return out


def _case(run, which, record, programs, manifest, predicted) -> dict:
    ways = record_candidates(record, manifest, predicted)
    needed = float(np.exp(np.mean(np.log(programs["measured"] / programs["point"]))))
    return {"run": run, "calibration": which, "programs": len(programs["measured"]),
            "needed": needed, "candidates": ways, "_programs": programs}


# Estimators: a factor from one case's candidates, and a parameter where one is fitted.
def _blend(a: str, b: str) -> Callable[[Mapping, float], float]:
    return lambda ways, w: math.exp(w * math.log(ways[a]) + (1 - w) * math.log(ways[b]))


FIXED = {
    MODEL_RATIO: lambda ways: ways[MODEL_RATIO],
    REFERENCE_SPEED: lambda ways: ways[REFERENCE_SPEED],
    CALIBRATION_SET: lambda ways: ways[CALIBRATION_SET],
    REFERENCE_ONLY: lambda ways: ways[REFERENCE_ONLY],
    "reference_speed_power_1": lambda ways: ways["reference_speed_power_1"],
    "median_of_candidates": lambda ways: float(np.median(
        [ways[w] for w in (MODEL_RATIO, REFERENCE_SPEED, CALIBRATION_SET, REFERENCE_ONLY)])),
    "median_of_set_ways_and_parts": lambda ways: float(np.median(
        [ways[w] for w in (REFERENCE_SPEED, CALIBRATION_SET, REFERENCE_ONLY)]
        + [ways[f"part_{p}"] for p in PARTS])),
    "geometric_mean_reference_speed_and_set": lambda ways: _blend(
        REFERENCE_SPEED, CALIBRATION_SET)(ways, 0.5),
}
WEIGHTS = np.round(np.linspace(-0.5, 1.5, 81), 3)
POWERS = np.round(np.linspace(0.0, 2.0, 81), 3)
FACTORS = np.round(np.exp(np.linspace(-0.5, 0.5, 101)), 4)
FITTED = {  # name: (grid of the parameter, factor from (candidates, parameter))
    "blend_reference_speed_and_set": (WEIGHTS, _blend(REFERENCE_SPEED, CALIBRATION_SET)),
    "blend_reference_speed_and_model_ratio": (WEIGHTS, _blend(REFERENCE_SPEED, MODEL_RATIO)),
    "set_shrunk_toward_1": (POWERS, lambda ways, a: ways[CALIBRATION_SET] ** a),
    "model_ratio_shrunk_toward_1": (POWERS, lambda ways, a: ways[MODEL_RATIO] ** a),
    "set_times_constant": (FACTORS, lambda ways, c: ways[CALIBRATION_SET] * c),
    "model_ratio_times_constant": (FACTORS, lambda ways, c: ways[MODEL_RATIO] * c),
}


def _log_biases(factor, parameter, group: list[dict]) -> np.ndarray:
    return np.array([math.log(factor(c["candidates"], parameter) / c["needed"]) for c in group])


def fit(grid, factor, group: list[dict]) -> float:
    """The parameter of `grid` with the least mean squared log bias on `group`."""
    return float(min(grid, key=lambda p: (np.mean(_log_biases(factor, p, group) ** 2), abs(p))))


def evaluate(all_cases: list[dict]) -> dict:
    """Each estimator's bias per calibration, fitted ones with each run left out."""
    runs = list(dict.fromkeys(c["run"] for c in all_cases))
    out = {}
    for name, factor in FIXED.items():
        out[name] = {"parameters": 0, "bias": [factor(c["candidates"]) / c["needed"]
                                               for c in all_cases]}
    for name, (grid, factor) in FITTED.items():
        bias, left_out = [None] * len(all_cases), {}
        for run in runs:
            parameter = fit(grid, factor, [c for c in all_cases if c["run"] != run])
            left_out[run] = parameter
            for i, c in enumerate(all_cases):
                if c["run"] == run:
                    bias[i] = factor(c["candidates"], parameter) / c["needed"]
        out[name] = {"parameters": 1, "bias": bias, "fitted_on_all": fit(grid, factor, all_cases),
                     "fitted_leaving_each_run_out": left_out}
    for entry in out.values():
        logs = np.log(entry["bias"])
        before = np.array([b for b, c in zip(logs, all_cases) if c["calibration"] == "before"])
        entry.update({"worst_abs_log_bias_as_factor": float(np.exp(np.abs(logs).max())),
                      "rms_log_bias_as_factor": float(np.exp(np.sqrt(np.mean(logs ** 2)))),
                      "bias_range": [float(np.exp(logs.min())), float(np.exp(logs.max()))],
                      "worst_before_as_factor": float(np.exp(np.abs(before).max())),
                      "within_1_1x": int(np.sum(np.abs(logs) <= math.log(1.1))),
                      "within_1_1x_before": int(np.sum(np.abs(before) <= math.log(1.1)))})
    return out


def coverage(all_cases: list[dict]) -> list[dict]:
    """The applied way's 90% intervals per calibration: coverage as fitted and widened (and
    the reference speed's as fitted, the way applied before)."""
    out = []
    for c in all_cases:
        ways = c["candidates"]
        spread = candidate_spread(ways)
        applied = choose_scale(ways)[0]
        logs = np.log(c["_programs"]["point"] * applied / c["_programs"]["measured"])
        folds = np.exp(np.abs(logs))
        out.append({"run": c["run"], "calibration": c["calibration"], "spread": spread,
                    # the bar figures for compile time under the applied way
                    "median_fold": float(np.median(folds)),
                    "p90_fold": float(np.quantile(folds, 0.9)), "max_fold": float(folds.max()),
                    "bias": float(np.exp(np.mean(logs))),
                    "log_uncertainty": log_uncertainty(spread),
                    **_interval(**c["_programs"], scale=applied,
                                uncertainty=log_uncertainty(spread)),
                    "reference_speed_as_fitted": _interval(
                        **c["_programs"], scale=ways[REFERENCE_SPEED], uncertainty=0.0)["as_fitted"]})
    return out


def report(artifact=None) -> dict:
    artifact = artifact or load_default("cpu")
    all_cases = cases(artifact)
    estimators = evaluate(all_cases)
    chosen = min(estimators,
                 key=lambda n: (estimators[n]["worst_abs_log_bias_as_factor"],
                                estimators[n]["parameters"]))
    spreads = [candidate_spread(c["candidates"]) for c in all_cases]
    return {
        "model_version": artifact.version,
        "runs": len({c["run"] for c in all_cases}), "calibrations": len(all_cases),
        "chosen": chosen,
        "candidate_spread": {"min": min(spreads), "median": float(np.median(spreads)),
                             "max": max(spreads)},
        "estimators": estimators,
        "cases": [{k: v for k, v in c.items() if not k.startswith("_")} for c in all_cases],
        "coverage_of_the_applied_way": coverage(all_cases),
    }


def _print(result: dict) -> None:
    names = list(result["estimators"])
    print(f"{result['calibrations']} calibrations of {result['runs']} runs; model "
          f"{result['model_version']}; candidate spread {result['candidate_spread']['min']:.2f}-"
          f"{result['candidate_spread']['max']:.2f} (median {result['candidate_spread']['median']:.2f})")
    print(f"{'estimator':<40} {'params':>6} {'worst':>6} {'rms':>6} {'before':>6} "
          f"{'in 1.1x':>7}  range  (in 1.1x: all/before)")
    for name in names:
        e = result["estimators"][name]
        print(f"{name:<40} {e['parameters']:>6} {e['worst_abs_log_bias_as_factor']:6.3f} "
              f"{e['rms_log_bias_as_factor']:6.3f} {e['worst_before_as_factor']:6.3f} "
              f"{e['within_1_1x']:>3}/{e['within_1_1x_before']:<3}  "
              f"{e['bias_range'][0]:.2f}-{e['bias_range'][1]:.2f}"
              + (f"  (fitted {e['fitted_on_all']})" if e["parameters"] else ""))
    print(f"chosen (smallest worst case): {result['chosen']}")
    shown = (REFERENCE_SPEED, CALIBRATION_SET, MODEL_RATIO)
    print(f"\n{'run':<26} {'cal':<12} {'needed':>6} " + " ".join(f"{n[:15]:>15}" for n in shown)
          + "  spread  covered (as fitted / widened; reference speed)")
    for i, (c, cov) in enumerate(zip(result["cases"], result["coverage_of_the_applied_way"])):
        print(f"{c['run']:<26} {c['calibration']:<12} {c['needed']:6.3f} "
              + " ".join(f"{result['estimators'][n]['bias'][i]:15.3f}" for n in shown)
              + f"  {cov['spread']:.2f}    {cov['as_fitted']:.2f} / {cov['widened']:.2f}; "
              f"{cov['reference_speed_as_fitted']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = report()
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
