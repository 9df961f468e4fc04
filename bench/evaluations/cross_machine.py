"""Does the CPU model carry to another CPU kind? Real-corpus programs measured on this
machine, predicted by models trained on rows from the training machine, before and after
`costmodel calibrate` here.

Three steps, each its own command so the timing step runs alone on the machine:

    python bench/evaluations/cross_machine.py heldout --out DIR    # fits; no timing (minutes, both cores)
    python bench/evaluations/cross_machine.py measure --out DIR    # times here (resumable)
    python bench/evaluations/cross_machine.py score --out DIR [--heldout FILE] [--json OUT.json]

The committed runs: `bench/data/cross_machine_amd/` (with the held-out predictions of every
real program, from the build of the shipped schema-13 model: `build_default(...,
predictions_out=...)`, its `leave_library_out` compile-time rows) and
`bench/data/cross_machine_amd_pass2/`, the same 94 programs an hour later,
`bench/data/cross_machine_amd_pass3/`, eight hours later, and
`bench/data/cross_machine_amd_pass4/`, with `costmodel calibrate`'s reference speed in place
(`--heldout bench/data/cross_machine_amd/heldout.parquet`); each pass ran `measure
--programs 94`, passes 1-3 with `--calibration-rounds 1`.

`heldout` fits the shipped recipe with each library held out (`leave_library_out`, as
`costmodel evaluate` does) and keeps every real program's held-out prediction, the model's
and the op-count power law's, in training-machine seconds. `measure` picks real programs
spread over the log of their training-machine compile time and over libraries, runs
`costmodel calibrate` here (before and after the programs, to see drift), and measures each
program in a fresh process as sweeps do, one at a time; each row is appended the moment it
is measured, so an interrupted run resumes. `score` compares the held-out predictions with
the training machine's measurements (the same-machine figure) and with this machine's,
uncalibrated and calibrated each way `_calibration_views` names.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from _calibration_views import VIEWS, factors, here_reference
from _fresh_runs import CALIBRATION_AFTER, CALIBRATION_BEFORE, measure_between_calibrations, read_measured

from costmodel.measure.machine import environment
from costmodel.models import load_default
from costmodel.training.evaluation import metrics
from costmodel.training.evaluation.evaluate import predictions, with_keys
from costmodel.training.fitting.fit import features_frame, model_params, select_rows
from costmodel.training.measure.calibrate import ROUNDS
from costmodel.training.store import dataset

DATA = Path(__file__).resolve().parents[2] / "training" / "data" / "cpu" / "rows.parquet"
HELDOUT = "heldout.parquet"
# before and after the programs (the measure step); the first committed run adds a
# three-round `costmodel calibrate` taken 40 minutes after it
CALIBRATIONS = (CALIBRATION_BEFORE, CALIBRATION_AFTER, "calibration_three_rounds.json")


def training_rows() -> pd.DataFrame:
    return select_rows(dataset.load([DATA]), "cpu").reset_index(drop=True)


def heldout(out: Path, jobs: int) -> None:
    """Held-out predictions of every real program, by library, on the training machine's rows
    (what `build_default(..., predictions_out=...)` keeps too, beside the other splits)."""
    rows = training_rows()
    pred = predictions(rows, "leave_library_out", models=("costmodel", "power_law"),
                       params=model_params("cpu"), jobs=jobs,
                       progress=lambda name: print("held out", name, flush=True))
    pred = with_keys(pred[pred["target"] == "compile_seconds"], rows)
    pred.to_parquet(out / HELDOUT)
    print(f"wrote {len(pred)} held-out predictions to {out / HELDOUT}")


def pick(rows: pd.DataFrame, count: int, max_seconds: float) -> pd.DataFrame:
    """`count` real programs, evenly spread over log compile time within each library (the
    libraries share the count by their size, at least two each), largest first within the
    budget `max_seconds` of training-machine seconds per program."""
    real = rows[(rows["library"].fillna("") != "") & (rows["compile_seconds"] <= max_seconds)]
    chosen = []
    sizes = real["library"].value_counts()
    for library, n in sizes.items():
        share = max(2, round(count * n / len(real)))
        group = real[real["library"] == library].sort_values("compile_seconds")
        index = np.unique(np.linspace(0, len(group) - 1, min(share, len(group))).round())
        chosen.append(group.iloc[index.astype(int)])
    return pd.concat(chosen).sort_values("compile_seconds").reset_index(drop=True)


def pick_synthetic(rows: pd.DataFrame, max_seconds: float) -> pd.DataFrame:
    """One program per synthetic family: the one nearest the family's median compile time
    among those within `max_seconds` (the machines' ratio by kind of program, not a score:
    held-out predictions are by library)."""
    synthetic = rows[(rows["library"].fillna("") == "") & (rows["compile_seconds"] <= max_seconds)]
    log_time = np.log(synthetic["compile_seconds"])
    distance = (log_time - log_time.groupby(synthetic["family"]).transform("median")).abs()
    nearest = distance.groupby(synthetic["family"]).idxmin()
    return synthetic.loc[nearest].sort_values("compile_seconds").reset_index(drop=True)


def measure(out: Path, count: int, max_seconds: float, synthetic: bool = False,
            rounds: int = ROUNDS) -> None:
    """Calibrate, measure the chosen programs (skipping those measured already), calibrate;
    each calibration of `rounds` rounds."""
    rows = training_rows()
    chosen = pick_synthetic(rows, max_seconds) if synthetic else pick(rows, count, max_seconds)
    print(f"{len(chosen)} programs, {chosen['compile_seconds'].sum():.0f} s of training-machine "
          f"compiles, on {environment()['cpu_model']} x{environment()['cpu_count']}", flush=True)
    programs = [(record["family"], json.loads(record["params"]))
                for record in chosen.to_dict("records")]
    measure_between_calibrations(out, programs, load_default("cpu"), rounds)


def _scores(predicted: np.ndarray, measured: np.ndarray) -> dict:
    fold = np.maximum(predicted / measured, measured / predicted)
    return {"median_fold": metrics.median_fold(predicted, measured),
            "p90_fold": metrics.p90_fold(predicted, measured),
            "within_2x": float(np.mean(fold <= 2.0)), "max_fold": float(fold.max()),
            "measured_over_predicted": float(np.median(measured / predicted))}


def _views(predicted: np.ndarray, raw: np.ndarray, steady: np.ndarray) -> dict:
    return {"raw": _scores(predicted, raw), "steady": _scores(predicted, steady)}


def score(out: Path, heldout_path: Path | None = None) -> dict:
    """Same-machine and other-machine errors of the held-out predictions of one program set
    (`heldout_path`: held-out predictions as `heldout` or `build_default` writes them).

    This machine's seconds are scored two ways: `raw`, as measured in the sweep's
    processes; `steady`, brought to the reference speed `costmodel calibrate` saw here
    (each row's seconds times (the calibration's median reference / the row's reference)
    ** the model's reference power), as the training labels are brought to the training machine's median
    reference: the model predicts a machine in a steady state, not the sweep's drift.
    """
    artifact = load_default("cpu")
    power = artifact.predictor.reference_power
    here = read_measured(out)
    train = training_rows().set_index("key")
    pred = pd.read_parquet(heldout_path or out / HELDOUT)
    pred = pred[(pred["target"] == "compile_seconds") & (pred["split"] == "leave_library_out")]
    ours = pred[pred["model"] == "costmodel"].set_index("key")
    baseline = pred[pred["model"] == "power_law"].set_index("key")
    keys = [k for k in here["key"] if k in ours.index and k in train.index]
    here = here.set_index("key").loc[keys]
    inputs = features_frame(train.loc[keys].copy()).to_dict("records")
    shares = artifact.predictor.part_shares(inputs)
    point = ours.loc[keys, "point"].to_numpy(float)
    power_law = baseline.loc[keys, "point"].to_numpy(float)
    raw = here["compile_seconds"].to_numpy(float)
    there = train.loc[keys, "compile_seconds"].to_numpy(float)
    row_ref = here["ref_seconds"].to_numpy(float)
    report = {
        "model_version": artifact.version,  # its phase shares weigh the part factors
        "programs": len(keys), "libraries": int(train.loc[keys, "library"].nunique()),
        "machine_here": {"cpu_model": str(here["cpu_model"].iloc[0]),
                         "cpu_count": int(here["cpu_count"].iloc[0])},
        "machine_there": {"cpu_model": str(train["cpu_model"].iloc[0]),
                          "cpu_count": int(train["cpu_count"].iloc[0])},
        "reference_power": power,
        "here_over_there_raw_median": float(np.median(raw / there)),
        "reference_here_median": float(np.median(row_ref)),
        "reference_there_median": float(np.median(train.loc[keys, "ref_seconds"])),
        # the held-out label: the training machine's seconds at its median reference
        "same_machine": {"model": _scores(point, ours.loc[keys, "actual"].to_numpy(float)),
                         "power_law": _scores(power_law,
                                              ours.loc[keys, "actual"].to_numpy(float))},
        # the training machine's seconds as its sweep measured them, against the predictions
        # times the one factor that fits them best: how far drift alone takes a machine's
        # own as-measured seconds from predictions of its steady state
        "same_machine_as_measured": _scores(point * float(np.exp(np.median(np.log(
            there / point)))), there),
        "calibrations": [],
    }
    for name in CALIBRATIONS:
        if not (out / name).exists():
            continue
        record = json.loads((out / name).read_text())
        steady = raw * (here_reference(record) / row_ref) ** power
        views = factors(record, shares, artifact.manifest)
        entry = {"file": name, "part_scales": record["part_scales"],
                 **{f"{view}_scale": float(np.median(views[view])) for view in VIEWS},
                 "uncalibrated": _views(point, raw, steady),
                 **{view: _views(point * views[view], raw, steady) for view in VIEWS},
                 "power_law_reference_speed": _views(power_law * views["reference_speed"],
                                                     raw, steady)}
        report["calibrations"].append(entry)
    same = report["same_machine"]["model"]["median_fold"]
    report["calibrated_over_same_machine"] = {
        view: {entry["file"]: {kind: entry[view][kind]["median_fold"] / same
                               for kind in ("raw", "steady")}
               for entry in report["calibrations"]} for view in VIEWS}
    report["rows"] = [{"key": k, "library": train.loc[k, "library"],
                       "there": float(train.loc[k, "compile_seconds"]), "here": float(h),
                       "heldout_point": float(p)} for k, h, p in zip(keys, raw, point)]
    return report


def _print(report: dict) -> None:
    def line(label: str, s: dict) -> str:
        return (f"  {label:<28} median {s['median_fold']:.2f}  p90 {s['p90_fold']:.2f}  "
                f"within 2x {100 * s['within_2x']:.0f}%  max {s['max_fold']:.1f}  "
                f"measured/predicted {s['measured_over_predicted']:.2f}")
    print(f"{report['programs']} programs from {report['libraries']} libraries; "
          f"{report['machine_there']} -> {report['machine_here']}; compile here over there "
          f"(raw) median {report['here_over_there_raw_median']:.2f}; reference in the sweep "
          f"{report['reference_there_median']:.3f} s there, {report['reference_here_median']:.3f}"
          " s here")
    print(line("same machine, held out", report["same_machine"]["model"]))
    print(line("same machine, power law", report["same_machine"]["power_law"]))
    print(line("same machine, as measured", report["same_machine_as_measured"]))
    for entry in report["calibrations"]:
        print(f" {entry['file']}: " + ", ".join(
            f"{view} x{entry[f'{view}_scale']:.2f}" for view in VIEWS) + "; parts "
              + ", ".join(f"{k} x{v:.2f}" for k, v in (entry["part_scales"] or {}).items()))
        for view in ("raw", "steady"):
            for kind in ("uncalibrated", *VIEWS, "power_law_reference_speed"):
                print(line(f"{view}: {kind}", entry[kind][view]))
    print(" calibrated over same machine:", json.dumps(report["calibrated_over_same_machine"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("heldout", "measure", "score"))
    parser.add_argument("--out", type=Path, required=True, help="working folder")
    parser.add_argument("--programs", type=int, default=64)
    parser.add_argument("--max-seconds", type=float, default=40.0,
                        help="largest training-machine compile time among the programs")
    parser.add_argument("--jobs", type=int, default=2, help="held-out fits side by side")
    parser.add_argument("--calibration-rounds", type=int, default=ROUNDS,
                        help="measure: rounds of each calibration (passes 1-3 ran 1)")
    parser.add_argument("--synthetic", action="store_true",
                        help="measure: one program per synthetic family instead")
    parser.add_argument("--heldout", type=Path, default=None,
                        help="score: held-out predictions to read (default: the heldout step's)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step == "heldout":
        heldout(args.out, args.jobs)
    elif args.step == "measure":
        measure(args.out, args.programs, args.max_seconds, args.synthetic,
                args.calibration_rounds)
    else:
        report = score(args.out, args.heldout)
        _print(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
