"""How far the chip's interval widens for programs of libraries no fit has seen.

The device correction sets its interval from held-out residuals, each library held out of
the fit in turn, and on those it covers about 93%. Programs of libraries nobody here had
labelled fall outside it more often: each outside suite, scored as shipped before any of
it joined a fit (`bench/evaluations/tpu_outside.py score`), was covered 62-74% of the time.
So the interval's log offsets grow with a program's distance from the training rows
(`DeviceCorrection.widening`, a `Widening` as the CPU model's): the rule the CPU's
widening fits (`interval_widening.fit_rule`), on those programs, each library weighing
the same, with the correction's held-out real-library programs (`device_correction
--held-out-out`, each one's distance measured from the other libraries' sweep rows) as
the programs it must not widen past need. Without them, one factor for all.

    python -m costmodel.training.evaluation.device_widening --model models/default/tpu-v5e \\
        --results bench/results/tpu_outside.json bench/results/tpu_outside_c.json \\
        bench/results/tpu_outside_fft.json bench/results/tpu_outside_de.json \\
        --features bench/data/tpu_outside/features.parquet \\
        bench/data/tpu_outside/features_de.parquet bench/data/tpu_outside/features_fft.parquet \\
        [--held-out bench/data/tpu_outside/correction_held_out.parquet \\
         --rows training/data/tpu-v5e] [--json bench/results/tpu_widening.json] [--dry-run]

Each results file holds the programs of one suite with the chip prediction and interval
they had as shipped (`ours`, `lo`, `hi`) and their chip seconds (`measured`); a features
file each program's model inputs (`tpu_outside.py features`), by key.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models.artifact import load
from costmodel.models.device_correction import CORRECTION_FILE, DeviceCorrection
from costmodel.models.novelty import Widening

from ..fitting.device_card import write_widening_line
from ..fitting.device_correction import install
from ..fitting.fit import features_frame, libraries
from .interval_widening import fit_rule, held_out_coverage, held_out_distances, inside

COVERAGE = 0.9


def ratios(results: dict, name: str) -> pd.DataFrame:
    """Per program of one suite: its log error over its interval's log offset on the side
    it fell (inside: at most 1), its library, key and the suite's `name`."""
    rows = results["rows"]
    measured, ours, lo, hi = (np.array([r[k] for r in rows], float)
                              for k in ("measured", "ours", "lo", "hi"))
    error = np.log(measured / ours)
    offset = np.where(error >= 0, np.log(hi / ours), np.log(ours / lo))
    return pd.DataFrame({"ratio": np.abs(error) / offset,
                         "library": [r["library"] for r in rows],
                         "key": [r.get("key", "") for r in rows], "bench": name})


def inputs_by_key(features: pd.DataFrame, names) -> dict[str, list[float]]:
    """Each program's model inputs `names` from a features table (`f_<name>` columns)."""
    table = features.drop_duplicates("key").set_index("key")
    return {key: [float(row[f"f_{n}"]) for n in names] for key, row in table.iterrows()}


def with_distance(bench: pd.DataFrame, predictor, inputs: dict) -> pd.DataFrame:
    """`bench` with each program's distance from the model's training rows; programs whose
    inputs are not in `inputs` are left out."""
    known = bench[bench["key"].isin(inputs)].reset_index(drop=True)
    values = np.array([inputs[k] for k in known["key"]], float).reshape(len(known), -1)
    return known.assign(distance=predictor.distance(
        pd.DataFrame(values, columns=list(predictor.feature_names))) if len(known) else [])


def held_out_ratios(held: pd.DataFrame, rows: pd.DataFrame, inputs: dict,
                    correction: DeviceCorrection, names) -> pd.DataFrame:
    """The correction's held-out real-library programs (`device_correction
    --held-out-out`: key, library, device, predicted): each one's ratio to the unwidened
    interval and its distance from the sweep rows of every other library."""
    held = held[held["library"] != "synthetic"].reset_index(drop=True)
    error = np.log(held["device"].to_numpy(float) / held["predicted"].to_numpy(float))
    ratio = np.abs(error) / np.where(error >= 0, correction.hi, -correction.lo)
    values = features_frame(rows).reindex(columns=list(names)).fillna(0.0).to_numpy(float)
    position = dict(zip(rows["key"], range(len(rows))))
    mine = np.array([inputs.get(k) if k in inputs else values[position[k]] if k in position
                     else [np.nan] * len(names) for k in held["key"]], float)
    distance = held_out_distances(values, libraries(rows), mine, held["library"].to_numpy())
    frame = pd.DataFrame({"ratio": ratio, "library": held["library"], "distance": distance})
    return frame[np.isfinite(frame["distance"])].reset_index(drop=True)


def fit(bench: pd.DataFrame, corpus: pd.DataFrame | None = None,
        coverage: float = COVERAGE) -> dict:
    """The rule (`fit_rule`: with `corpus` ratios, one that grows with the distance; else
    one factor) and what it does: each suite's coverage before and after, the coverage
    with each library held out of the rule that scores it, and the held-out programs'."""
    if corpus is None and "distance" not in bench:
        bench = bench.assign(distance=0.0)
    rule = fit_rule(bench, corpus, coverage)
    runs = bench.groupby("bench", sort=False)
    report = {**rule.as_dict(), "coverage": coverage, "programs": int(len(bench)),
              "libraries": int(bench["library"].nunique()),
              "coverage_before": {b: round(float((g["ratio"] <= 1).mean()), 3) for b, g in runs},
              "coverage_after": {b: round(float(inside(g, rule).mean()), 3) for b, g in runs},
              "coverage_library_held_out": round(
                  held_out_coverage(bench, corpus, coverage)["all"], 3),
              "mean_scale": round(float(rule.scale(bench["distance"]).mean()), 3)}
    if corpus is not None and len(corpus):
        report["held_out_programs"] = int(len(corpus))
        report["held_out_coverage_before"] = round(float((corpus["ratio"] <= 1).mean()), 3)
        report["held_out_coverage_after"] = round(float(inside(corpus, rule).mean()), 3)
        report["held_out_mean_scale"] = round(float(rule.scale(corpus["distance"]).mean()), 3)
    return report


def widened(correction: DeviceCorrection, report: dict) -> DeviceCorrection:
    """`correction` with the fitted rule, recorded in what it says it was fitted on."""
    return correction.widened(Widening.from_dict(report), report)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--results", type=Path, nargs="+", required=True)
    parser.add_argument("--features", type=Path, nargs="*", default=[],
                        help="the suites' model inputs (tpu_outside.py features)")
    parser.add_argument("--held-out", type=Path,
                        help="the correction's held-out predictions (--held-out-out)")
    parser.add_argument("--rows", help="the TPU sweep rows the model was fitted on")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--dry-run", action="store_true", help="report only; install nothing")
    args = parser.parse_args(argv)
    if bool(args.held_out) != bool(args.rows) or (args.held_out and not args.features):
        parser.error("--held-out needs --rows and --features")
    artifact = load(args.model)
    correction = artifact.device_correction
    if correction is None:
        parser.error(f"{args.model} has no {CORRECTION_FILE} to widen")
    bench = pd.concat([ratios(json.loads(path.read_text()), path.stem)
                       for path in args.results], ignore_index=True)
    corpus = None
    if args.held_out:
        from costmodel.training.store import dataset

        names = artifact.predictor.feature_names
        inputs = inputs_by_key(pd.concat([pd.read_parquet(p) for p in args.features]), names)
        bench = with_distance(bench, artifact.predictor, inputs)
        rows = dataset.load([args.rows])
        corpus = held_out_ratios(pd.read_parquet(args.held_out), rows[rows["status"] == "ok"],
                                 inputs, correction, names)
    report = fit(bench, corpus)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if not args.dry_run:
        install(args.model, widened(correction, report))
        write_widening_line(args.model, report)
        print(f"installed {args.model / CORRECTION_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
