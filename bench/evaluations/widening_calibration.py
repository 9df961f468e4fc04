"""Which part of the CPU model's compile-time intervals covers the stored runs too much,
once predictions are scaled as `costmodel calibrate` scales them (the model ratio)?

A prediction's 90% interval is (a) split-conformal from the fit's held-out residuals, (b)
widened with the program's distance from the training rows by a rule fitted on the
stored bench runs (`training.evaluation.interval_widening`), and (c) widened by the
calibration's uncertainty (`costmodel.models.calibration.widen_interval`). For each stored
bench run in `bench/results` (CPU, this schema) this scores the shipped model's intervals
with (a) alone, (a+b) and (a+b+c), the uncertainty being that of the run's calibration
before its programs (the library and unseen benches kept none: no (c)), and two widening
fits, each with every bench library's programs scored against a rule fitted without them:

- `as_shipped`: the shipped model's procedure, the bench programs' ratios taken with the
  reference speed on the runs it was fitted on (every run without a recorded model);
- `refit`: the ratios taken with the model ratio, on the same runs.

Runs stored after the shipped rule was fitted (not in its record) are scored by it as they
came, each program once, and kept out of both fits.

The corpus's libraries held out are scored from the build's held-out predictions
(`bench/data/cross_machine_amd/heldout.parquet`, the shipped model's evaluation), on the
training machine and, for the 94 real programs measured on the second CPU kind
(`bench/evaluations/calibration_choice.py`'s cross-machine passes), there, scaled by each
calibration's model ratio, widened by the shipped rule and by `previous` (the rule
given before, for comparison), each program's distance from the other libraries' rows.
Nothing is compiled:

    python bench/evaluations/widening_calibration.py [--json bench/results/widening_calibration.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models import load_default
from costmodel.models.novelty import Widening
from costmodel.models.predictor import to_log
from costmodel.training.evaluation import interval_widening as widening
from costmodel.training.evaluation.outside import CALIBRATION_KEY, current_results, scaled_predictions
from costmodel.training.fitting.fit import select_rows
from costmodel.training.measure.calibrate import (
    candidate_spread,
    candidates,
    choose_scale,
    log_uncertainty,
    model_ratio_scale,
    predicted_set,
)
from costmodel.training.store import dataset

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "training/data/cpu/rows.parquet"
HELDOUT = ROOT / "bench/data/cross_machine_amd/heldout.parquet"
RESULTS = ROOT / "bench/results"


def errors(artifact, data: dict) -> pd.DataFrame:
    """Per program of one run: its log error and its unwidened interval's log offset on
    the side it fell, predictions scaled by the model ratio where the run keeps its
    calibration (`outside.run_scale`)."""
    point, lo, hi, measured = scaled_predictions(widening.unwidened(artifact), data)
    z, z_lo, z_hi, z_actual = (to_log("compile_seconds", v) for v in (point, lo, hi, measured))
    error = z_actual - z
    return pd.DataFrame({"error": np.abs(error),
                         "offset": np.where(error >= 0, z_hi - z, z - z_lo)})


def uncertainty(artifact, data: dict) -> float:
    """The log uncertainty `costmodel calibrate` would have recorded before the run's
    programs (0 for a run that kept no calibration)."""
    calibration = data.get(CALIBRATION_KEY)
    if not calibration:
        return 0.0
    manifest = artifact.manifest
    ways = candidates(calibration, manifest["calibration_set"], manifest,
                      predicted_set(calibration, artifact))
    return log_uncertainty(candidate_spread(ways))


def covered(frame: pd.DataFrame, rule: Widening, log_uncertainty_: float = 0.0) -> np.ndarray:
    """Inside the interval widened by `rule` and then by the calibration's uncertainty
    (each side's log offset w -> sqrt(w^2 + u^2), as `widen_interval`)."""
    offset = frame["offset"].to_numpy() * rule.scale(frame["distance"].to_numpy())
    return frame["error"].to_numpy() <= np.hypot(offset, log_uncertainty_) * (1 + 1e-12)


def held_out(fit_on: pd.DataFrame, scored: pd.DataFrame, corpus: pd.DataFrame) -> np.ndarray:
    """Each scored program inside a rule fitted on `fit_on` without its library's programs."""
    inside = np.zeros(len(scored), bool)
    for name in scored["library"].unique():
        mine = (scored["library"] == name).to_numpy()
        rule = widening.fit_rule(fit_on[fit_on["library"] != name], corpus)
        inside[mine] = widening.inside(scored[mine], rule)
    return inside


# the compile-time rule shipped before the widening was fitted with the model ratio
PREVIOUS = Widening(1.1238819513946519, 4.2266767681970965, 0.25)


def cross_machine(artifact, corpus: pd.DataFrame, rule: Widening) -> list[dict]:
    """Coverage of the real programs measured on the second CPU kind, per calibration."""
    from calibration_choice import cases

    distance = corpus.drop_duplicates("key").set_index("key")["distance"]
    out = []
    for case in cases(artifact):
        if not case["run"].startswith("cross_machine"):
            continue
        keys = [r["key"] for r in json.loads((RESULTS / f"{case['run']}.json").read_text())["rows"]]
        frame = pd.DataFrame({"distance": distance.loc[keys].to_numpy()})
        scale, programs = choose_scale(case["candidates"])[0], case["_programs"]
        frame["ratio"] = widening._ratio("compile_seconds", *(programs[k] * scale for k in (
            "point", "lo", "hi")), programs["measured"])
        out.append({"run": case["run"], "calibration": case["calibration"],
                    **{name: float(widening.inside(frame, r).mean()) for name, r in (
                        ("a", Widening()), ("shipped", rule), ("previous", PREVIOUS))}})
    return out


def report() -> dict:
    artifact = load_default("cpu")
    rows = select_rows(dataset.load([DATA]), "cpu")
    predictions = pd.read_parquet(HELDOUT)
    corpus = widening.corpus_ratios(predictions, rows)
    chosen = predictions[(predictions["split"] == "leave_library_out")
                         & (predictions["target"] == "compile_seconds")
                         & (predictions["model"] == "costmodel")]
    corpus["key"] = chosen.loc[chosen["key"].isin(rows["key"]), "key"].to_numpy()
    runs = current_results(RESULTS, "cpu")
    parts, by_speed, u = [], [], {}
    for name, data in runs.items():
        ratios = widening.interval_ratios(artifact, data).assign(bench=name)
        parts.append(pd.concat([ratios, errors(artifact, data)], axis=1))
        speed = {k: v for k, v in data.items() if k != CALIBRATION_KEY}
        by_speed.append(widening.interval_ratios(artifact, speed).assign(bench=name))
        u[name] = uncertainty(artifact, data)
    everything = pd.concat(parts, ignore_index=True)
    speed = pd.concat(by_speed, ignore_index=True)
    recorded = artifact.manifest["metrics"]["interval_widening"]["compile_seconds"]
    shipped = Widening.from_dict(recorded)
    fitted_runs = set(recorded["coverage_after"])
    # the runs the shipped rule was fitted on, refitted and held out; runs stored since
    # are scored by the shipped rule as they came (`later`)
    bench = everything[everything["bench"].isin(fitted_runs)].reset_index(drop=True)
    as_shipped = speed[speed["bench"].isin(fitted_runs)]
    refit = widening.fit_rule(bench, corpus)
    held = {"as_shipped": held_out(as_shipped, bench, corpus),
            "refit": held_out(bench, bench, corpus)}
    per_run = {}
    for name, frame in everything.groupby("bench", sort=False):
        mine = (bench["bench"] == name).to_numpy()
        per_run[name] = {
            "programs": len(frame), "log_uncertainty": u[name],
            "model_ratio": bool(runs[name].get(CALIBRATION_KEY)),
            "a": float(covered(frame, Widening()).mean()),
            "a_b_shipped": float(covered(frame, shipped).mean()),
            "a_b_c_shipped": float(covered(frame, shipped, u[name]).mean()),
            "a_b_c_refit": float(covered(frame, refit, u[name]).mean()),
            **({f"held_out_{k}": float(v[mine].mean()) for k, v in held.items()}
               if mine.any() else {"later": True})}
    rules = {"shipped": shipped, "refit": refit}
    return {
        "model_version": artifact.version, "programs": len(bench),
        "libraries": int(bench["library"].nunique()),
        "rules": {k: rule.as_dict() for k, rule in rules.items()},
        "runs": per_run,
        "all": {"a": float((bench["ratio"] <= 1).mean()),
                "a_b_shipped": float(widening.inside(bench, shipped).mean()),
                **{f"held_out_{k}": float(v.mean()) for k, v in held.items()}},
        "corpus": {"programs": len(corpus), "a": float((corpus["ratio"] <= 1).mean()),
                   **{k: float(widening.inside(corpus, rule).mean())
                      for k, rule in rules.items()}},
        "mean_scale": {k: {"benches": float(rule.scale(bench["distance"]).mean()),
                           "corpus": float(rule.scale(corpus["distance"]).mean())}
                       for k, rule in rules.items()},
        "cross_machine": cross_machine(artifact, corpus, shipped),
        "model_ratio_of_runs": {name: model_ratio_scale(
            data[CALIBRATION_KEY], predicted_set(data[CALIBRATION_KEY], artifact))
            for name, data in runs.items() if data.get(CALIBRATION_KEY)},
    }


def _print(result: dict) -> None:
    print(f"model {result['model_version']}: {result['programs']} bench programs of "
          f"{result['libraries']} libraries; rules {json.dumps(result['rules'])}")
    print(f"{'run':<26} {'n':>3} {'u':>5}  {'a':>5} {'a+b':>5} {'a+b+c':>5}  "
          f"{'held out: as shipped':>20} {'refit':>6}")
    for name, r in result["runs"].items():
        held = ("(stored since the fit)" if r.get("later") else
                f"{r['held_out_as_shipped']:20.3f} {r['held_out_refit']:6.3f}")
        print(f"{name:<26} {r['programs']:>3} {r['log_uncertainty']:5.3f}  {r['a']:5.3f} "
              f"{r['a_b_shipped']:5.3f} {r['a_b_c_shipped']:5.3f}  {held}")
    a = result["all"]
    print(f"{'all':<26} {result['programs']:>3} {'':5}  {a['a']:5.3f} {a['a_b_shipped']:5.3f} "
          f"{'':5}  {a['held_out_as_shipped']:20.3f} {a['held_out_refit']:6.3f}")
    print("corpus's libraries held out:", json.dumps(result["corpus"]))
    print("mean multiplier of the log width:", json.dumps(result["mean_scale"]))
    print("real programs on the second CPU kind, library held out (a / shipped / previous):")
    for case in result["cross_machine"]:
        print(f"  {case['run']:<22} {case['calibration']:<12} {case['a']:.3f} "
              f"{case['shipped']:.3f} {case['previous']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = report()
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()
