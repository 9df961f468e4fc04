"""How well does the shipped CPU model predict programs built with JAX libraries that no
corpus family, bench or training row has used?

Issue #19 keeps every library off its training list for independent evaluation; this bench
is that evaluation, run the way a user on a new machine meets the model: `costmodel
calibrate` here, then each program measured in a fresh process as sweeps measure (median
of three repeats, peak host-RSS growth of the first compile, the reference program timed
alongside), never trained on. The programs (`bench/evaluations/outside_programs.py`) are train steps,
simulations, solvers, searches and rollouts written with jraph, jax-md, ott-jax, jaxopt,
dm-pix, evosax, pgx, gymnax, rlax, distrax and mctx, at sizes from a tenth of a second to
tens of seconds of compile.

Two steps, so the timing step runs alone on the machine:

    python bench/evaluations/outside_libraries.py measure --out DIR [--calibration-rounds 3]  # resumable
    python bench/evaluations/outside_libraries.py score --out DIR [--json OUT.json]

`--programs FILE` measures another file's `OUTSIDE_FAMILIES` the same way (e.g.
`bench/evaluations/failure_class_programs.py`: programs of the kinds issue #19 saw mispredicted).

`score` reports compile seconds uncalibrated and calibrated (the factor `costmodel
calibrate` wrote before the programs), peak host memory, and the op-count power laws fitted
leave-one-out on these programs themselves (a baseline that has seen the suite). With
`--target h100` both steps are for the deviceless H100 model instead: no `costmodel
calibrate` (it times CPU compiles), and predictions are scaled by the reference compile
timed beside each program (the run's median over the model's, to its reference power), as
the other benches scale them. Needs the outside extra (`pip install -e ".[outside]"`,
versions pinned there).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from _calibration_views import here_reference
from _fresh_runs import CALIBRATION_BEFORE, measure_between_calibrations, measure_rows, read_measured

from costmodel.features import SCHEMA_VERSION
from costmodel.measure.user_modules import import_module_or_file
from costmodel.models import load_default
from costmodel.models.predictor import LOG_OFFSETS
from costmodel.training.evaluation import metrics
from costmodel.training.evaluation.outside import CALIBRATION_KEY, speed_scale, stored_calibration
from costmodel.training.fitting.fit import features_frame, select_rows
from costmodel.training.measure.calibrate import MODEL_RATIO, ROUNDS, applied, model_ratio_scale

PROGRAMS_FILE = Path(__file__).with_name("outside_programs.py")
TRAINING_ROWS = Path(__file__).resolve().parents[2] / "training/data/cpu/rows.parquet"


def measure(out: Path, rounds: int, only: list[str] | None = None, target: str = "",
            programs_file: Path = PROGRAMS_FILE) -> None:
    module = import_module_or_file(str(programs_file))
    programs = [(family.name, params) for family in module.OUTSIDE_FAMILIES
                for params in family.grid if not only or family.name in only]
    print(f"{len(programs)} programs from {len(module.OUTSIDE_FAMILIES)} families", flush=True)
    modules = (str(programs_file),)
    if target:
        measure_rows(out, programs, "gpu", target, modules=modules)
    else:
        measure_between_calibrations(out, programs, load_default("cpu"), rounds,
                                     modules=modules)


def reference_here(out: Path, rows, target: str) -> tuple[float, str]:
    """The reference program's seconds on the machine of the run, and where they come
    from: the reference timings of `costmodel calibrate` before the programs (CPU), or
    those beside the programs (the H100)."""
    if target:
        return float(np.median(rows["ref_seconds"])), "the reference beside each program"
    record = json.loads((out / CALIBRATION_BEFORE).read_text())
    return here_reference(record), "costmodel calibrate before the programs"


def model_ratio_before(out: Path, artifact) -> float | None:
    """The factor `costmodel calibrate` applies from the calibration before the programs
    (the model ratio, `applied`): the record's own ratio where `artifact`
    wrote it, else recomputed from the set's seconds there and the model's predictions of
    the set from its training rows' features (the same features)."""
    record = json.loads((out / CALIBRATION_BEFORE).read_text())
    ratio = (record.get("candidates") or {}).get("model_ratio")
    if not ratio or record.get("model_version") != artifact.version:
        from calibration_choice import set_predictions

        here = {name: p["here"] for name, p in record["programs"].items()}
        ratio = model_ratio_scale(here, set_predictions(artifact))
    return ratio and applied(MODEL_RATIO, ratio)


def scores(predicted: np.ndarray, measured: np.ndarray, lo: np.ndarray | None = None,
           hi: np.ndarray | None = None, offset: float = 0.0) -> dict:
    """The judge's figures for one target; memory folds on bytes + the model's offset."""
    pred, actual = predicted + offset, measured + offset
    out = {"median_fold": metrics.median_fold(pred, actual),
           "p90_fold": metrics.p90_fold(pred, actual), "within_2x": metrics.within(pred, actual),
           "max_fold": float(metrics.fold_errors(pred, actual).max()),
           "spearman": metrics.spearman(predicted, measured),
           "measured_over_predicted": float(np.median(actual / pred))}
    if lo is not None:
        out["coverage_90"] = metrics.coverage(lo, hi, measured)
    return out


def power_law_leave_one_out(ops: np.ndarray, measured: np.ndarray, offset: float = 0.0
                            ) -> np.ndarray:
    """Each program predicted by log(target + offset) linear in log(op count), fitted on
    the other programs of the suite."""
    x, y = np.log(ops), np.log(measured + offset)
    predicted = np.empty_like(y)
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        slope, intercept = np.polyfit(x[keep], y[keep], 1)
        predicted[i] = intercept + slope * x[i]
    return np.exp(predicted) - offset


def score(out: Path, target: str = "") -> dict:
    backend = "gpu" if target else "cpu"
    artifact = load_default(backend, target)
    rows = read_measured(out, backend, target).sort_values("compile_seconds").reset_index(drop=True)
    reference, scale_from = reference_here(out, rows, target)
    scale = speed_scale(artifact, reference)  # the reference speed
    ratio = None if target else model_ratio_before(out, artifact)
    if ratio:  # what `costmodel calibrate` applies
        scale, scale_from = ratio, "costmodel calibrate before the programs (model ratio)"
    inputs = features_frame(rows).to_dict("records")
    predicted = artifact.predict(inputs)
    seconds = rows["compile_seconds"].to_numpy(float)
    rss = rows["peak_rss_bytes"].to_numpy(float)
    ops = rows["f_hlo_ops"].to_numpy(float)
    time_pred = {k: v * scale for k, v in predicted["compile_seconds"].items()}
    rss_pred = predicted["peak_rss_bytes"]
    rss_offset = LOG_OFFSETS["peak_rss_bytes"]
    time_baseline = power_law_leave_one_out(ops, seconds)
    rss_baseline = power_law_leave_one_out(ops, rss, rss_offset)
    libraries = rows["library"].to_numpy()
    time_folds = metrics.fold_errors(time_pred["point"], seconds)
    over_1s = seconds >= 1
    return {
        "model": artifact.version, "programs": len(rows),
        "libraries": sorted(set(libraries)),
        "machine": {"cpu_model": str(rows["cpu_model"].iloc[0]),
                    "cpu_count": int(rows["cpu_count"].iloc[0])},
        "backend": backend, "target": target, "schema_version": SCHEMA_VERSION,
        "reference_s": reference, "calibration_scale": scale, "calibration_from": scale_from,
        "compile_seconds": {
            "calibrated": scores(time_pred["point"], seconds, time_pred["lo"], time_pred["hi"]),
            "uncalibrated": scores(predicted["compile_seconds"]["point"], seconds),
            "power_law_leave_one_out": scores(time_baseline, seconds),
            **({"calibrated_over_1s": scores(*(v[over_1s] for v in (
                time_pred["point"], seconds, time_pred["lo"], time_pred["hi"])))}
               if over_1s.any() else {}),
            "median_abs_log_error": {
                "model": metrics.median_abs_log_error(time_pred["point"], seconds),
                "power_law": metrics.median_abs_log_error(time_baseline, seconds)}},
        "peak_rss_bytes": {
            "model": scores(rss_pred["point"], rss, rss_pred["lo"], rss_pred["hi"], rss_offset),
            "power_law_leave_one_out": scores(rss_baseline, rss, offset=rss_offset)},
        "by_library": {lib: float(np.median(time_folds[libraries == lib]))
                       for lib in sorted(set(libraries))},
        "rows": [{"family": f, "params": p, "library": lib, "hlo_ops": int(o),
                  "measured_s": float(s), "predicted_s": float(pt),
                  "interval_s": [float(lo), float(hi)], "fold": float(fo),
                  "power_law_s": float(b), "peak_rss_mb": r / 2**20,
                  "predicted_rss_mb": float(pr) / 2**20}
                 for f, p, lib, o, s, pt, lo, hi, fo, b, r, pr in zip(
                     rows["family"], rows["params"], libraries, ops, seconds,
                     time_pred["point"], time_pred["lo"], time_pred["hi"], time_folds,
                     time_baseline, rss, rss_pred["point"])],
        # as the other benches store them (`training.evaluation.outside`), so model cards
        # and tests score any model of this schema on these programs without compiling
        # (predictions unscaled there, as theirs)
        # (host memory too, which widens the model's host-memory interval)
        "results": [{"program": f"{f} {p}", "library": lib, "model_inputs": inputs,
                     "measured_s": float(s), "predicted_s": float(pt),
                     "interval_s": [float(lo), float(hi)], "fold_scaled": float(fo),
                     "inside_interval_scaled": bool(lo * scale <= s <= hi * scale),
                     "measured_peak_rss_bytes": float(r)}
                    for f, p, lib, inputs, s, pt, lo, hi, fo, r in zip(
                        rows["family"], rows["params"], libraries, inputs,
                        seconds, *(predicted["compile_seconds"][k] for k in ("point", "lo", "hi")),
                        time_folds, rss)],
        "skipped": {},
        # the calibration before the programs, so any model of this schema is scaled by
        # its own model ratio when the stored run is scored again (CPU only)
        **({} if target else {CALIBRATION_KEY: stored_calibration(
            json.loads((out / CALIBRATION_BEFORE).read_text()),
            select_rows(pd.read_parquet(TRAINING_ROWS), "cpu"))}),
    }


def _print(report: dict) -> None:
    def line(label: str, s: dict) -> str:
        cover = f"  90% coverage {100 * s['coverage_90']:.0f}%" if "coverage_90" in s else ""
        return (f"  {label:<26} median {s['median_fold']:.2f}  p90 {s['p90_fold']:.2f}  "
                f"within 2x {100 * s['within_2x']:.0f}%  max {s['max_fold']:.1f}  Spearman "
                f"{s['spearman']:.3f}  measured/predicted {s['measured_over_predicted']:.2f}"
                + cover)
    print(f"{report['programs']} programs, {len(report['libraries'])} libraries, on "
          f"{report['machine']}; model {report['model']}; calibration x"
          f"{report['calibration_scale']:.2f} ({report['calibration_from']})")
    for row in report["rows"]:
        print(f"  {row['family']:<34} {row['params']:<40} {row['hlo_ops']:>7} ops  measured "
              f"{row['measured_s']:7.2f} s  predicted {row['predicted_s']:7.2f} s  fold "
              f"{row['fold']:5.2f}  rss {row['peak_rss_mb']:7.1f} MB predicted "
              f"{row['predicted_rss_mb']:7.1f}")
    print("compile seconds")
    for kind, s in report["compile_seconds"].items():
        if kind != "median_abs_log_error":
            print(line(kind, s))
    print("  median |log error|:", json.dumps(report["compile_seconds"]["median_abs_log_error"]))
    print("peak host RSS")
    for kind, s in report["peak_rss_bytes"].items():
        print(line(kind, s))
    print("median fold by library:", json.dumps({k: round(v, 2)
                                                 for k, v in report["by_library"].items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("measure", "score"))
    parser.add_argument("--out", type=Path, required=True, help="working folder")
    parser.add_argument("--calibration-rounds", type=int, default=ROUNDS)
    parser.add_argument("--only", nargs="*", default=None, help="measure: these families")
    parser.add_argument("--target", default="", help="a GPU target (h100) instead of CPU")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--programs", type=Path, default=PROGRAMS_FILE,
                        help="measure: the file whose OUTSIDE_FAMILIES to measure")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step == "measure":
        measure(args.out, args.calibration_rounds, args.only, args.target, args.programs)
    else:
        report = score(args.out, args.target)
        _print(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
