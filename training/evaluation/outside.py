"""Scores on programs outside the corpus, from the stored results of the benches.

`bench/evaluations/unseen_programs.py`, `bench/evaluations/library_programs.py` and
`bench/evaluations/outside_libraries.py` time programs that no corpus family builds and keep
each one's model inputs next to its measured seconds. Any model for the same backend, target
and feature schema can be scored on them again without compiling: tests do so for the
shipped models, and model cards report it. The results folder is always named by the caller
(`bench/results` in a source checkout; an installed package has no benches).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from costmodel.features import SCHEMA_VERSION
from costmodel.features.schema import OLDEST_READ, stale, with_added
from costmodel.models.predictor import LOG_OFFSETS

from ..measure.calibrate import (
    MODEL_RATIO,
    applied,
    model_ratio_scale,
    predicted_set,
    reference_speed_scale,
)
from . import metrics


def stored_results(folder: Path, backend: str, target: str = "") -> dict[str, dict]:
    """Bench result files in `folder` measured for (backend, target), by file stem, with
    model inputs."""
    found = {}
    for path in sorted(Path(folder).glob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict):  # other benches' results
            continue
        rows = data.get("results", [])
        if (data.get("backend"), data.get("target", "")) == (backend, target or "") and rows \
                and all("model_inputs" in row for row in rows):
            found[path.stem] = data
    return found


def current_results(folder: Path, backend: str, target: str = "") -> dict[str, dict]:
    """`stored_results` whose model inputs are of this costmodel's feature schema (the
    ones a model of this schema can be scored on)."""
    return {name: data for name, data in stored_results(folder, backend, target).items()
            if OLDEST_READ <= data["schema_version"] <= SCHEMA_VERSION}


# Where a stored bench result keeps each predicted quantity's measurement. Every bench
# times compiles; the outside-libraries runs also keep each compile's peak host-RSS growth,
# and `bench/evaluations/bench_memory.py` adds it to the library and unseen benches' results.
MEASURED_KEYS = {"compile_seconds": "measured_s", "peak_rss_bytes": "measured_peak_rss_bytes"}


def measures(data: dict, quantity: str) -> bool:
    """Whether every program of a stored bench result has a measured `quantity`."""
    return all(MEASURED_KEYS[quantity] in row for row in data["results"])


def stored_inputs(data: dict) -> list[dict[str, float]]:
    """Each program's model inputs of one stored bench run, with what later feature schemas
    added (`with_added`), as a model of this schema reads them."""
    return [with_added(row["model_inputs"]) for row in data["results"]]


def scaled_predictions(artifact, data: dict, quantity: str = "compile_seconds"
                       ) -> tuple[np.ndarray, ...]:
    """`(point, lo, hi, measured)` of `quantity` (compile seconds, or peak RSS bytes) of
    one stored bench run; predicted seconds scaled as `costmodel calibrate` would scale
    them for `artifact` on the run's machine (`run_scale`), memory as predicted (a faster
    machine does not need less of it)."""
    rows = data["results"]
    out = artifact.predict(stored_inputs(data))[quantity]
    speed = run_scale(artifact, data) if quantity == "compile_seconds" else 1.0
    point, lo, hi = (out[key] * speed for key in ("point", "lo", "hi"))
    return point, lo, hi, np.array([row[MEASURED_KEYS[quantity]] for row in rows], float)


# Where a stored bench run keeps the calibration taken before its programs: per program
# of the calibration set, its compile seconds there and its model inputs.
CALIBRATION_KEY = "calibration_before"


def run_scale(artifact, data: dict) -> float:
    """The factor `costmodel calibrate` applies for `artifact` on the machine of a stored
    bench run: the model ratio (the calibration set's seconds there over `artifact`'s
    predictions of it, `applied` as calibrating applies it) where the run keeps the calibration
    taken before its programs, else the reference speed (`speed_scale`; the library and
    unseen benches kept only the reference program's time)."""
    calibration = data.get(CALIBRATION_KEY)
    ratio = calibration and model_ratio_scale(calibration, predicted_set(calibration, artifact))
    return applied(MODEL_RATIO, ratio) if ratio else speed_scale(artifact, data["reference_s"])


def speed_scale(artifact, reference_seconds: float) -> float:
    """What `costmodel calibrate` would apply for `artifact` without a model to predict
    the set with, on the machine of a bench run whose reference program took
    `reference_seconds`: that time over the model's median reference, to the model's
    reference power (the first power for a model without one)."""
    model_reference = artifact.manifest.get("reference_seconds")
    if not model_reference:
        return 1.0
    return reference_speed_scale(reference_seconds, model_reference,
                                 artifact.predictor.reference_power) \
        or reference_seconds / model_reference


def stored_calibration(record: dict, rows) -> dict[str, dict]:
    """What a bench run stores of `costmodel calibrate`'s record taken before its programs
    (`CALIBRATION_KEY`): each set program's figures there (compile seconds, the reference
    timed beside, phase parts) and, from its latest row among the training `rows`, its
    model inputs (a program's features do not depend on the machine that compiles it)."""
    from ..corpus.calibration import FAMILY
    from ..fitting.fit import features_frame

    mine = rows[rows["family"] == FAMILY].sort_values("measured_at")
    inputs = {json.loads(params)["program"]: features
              for params, features in zip(mine["params"], features_frame(mine).to_dict("records"))}
    return {name: {**program["here"], "model_inputs": inputs[name]}
            for name, program in record["programs"].items() if name in inputs}


def score(artifact, data: dict, quantity: str = "compile_seconds") -> dict:
    """Fold errors of `artifact`'s `quantity` on one bench result: compile seconds scaled
    as `costmodel calibrate` would scale them for this model on the run's machine
    (`run_scale`; other models predict the calibration set otherwise), host
    memory on bytes plus the model's offset, as model cards take memory ratios.

    Raises:
        ValueError: The stored inputs are of another feature schema (re-run the bench).
    """
    if not OLDEST_READ <= data["schema_version"] <= SCHEMA_VERSION:
        raise ValueError(f"stored inputs are feature schema {data['schema_version']}, this "
                         f"costmodel reads {OLDEST_READ} to {SCHEMA_VERSION}; re-run the "
                         "bench to refresh")
    if any(stale(data["schema_version"], row["model_inputs"]) for row in data["results"]):
        raise ValueError(f"stored inputs are feature schema {data['schema_version']}, whose "
                         f"inputs schema {SCHEMA_VERSION} changed for some of these programs; "
                         "lower them again (the bench's --refresh-inputs, or reextract)")
    point, lo, hi, measured = scaled_predictions(artifact, data, quantity)
    offset = LOG_OFFSETS[quantity]
    folds = metrics.fold_errors(point + offset, measured + offset)
    return {"n": len(measured), "folds": folds, "median_fold": float(np.median(folds)),
            "max_fold": float(folds.max()),
            "within_2x": metrics.within(point + offset, measured + offset),
            "coverage": metrics.coverage(lo, hi, measured),
            "spearman": metrics.spearman(point, measured),
            "under_predicted": int(np.sum(point < measured)),
            "skipped": len(data.get("skipped", {}))}


def card_section(artifact, folder: Path, backend: str, target: str = "") -> list[str]:
    """Markdown lines for a model card: this model on each bench stored in `folder`,
    compile time and, where the bench measured it, host memory (none: no lines)."""
    results = current_results(folder, backend, target)
    if not results:
        return []
    memory = {name: data for name, data in results.items() if measures(data, "peak_rss_bytes")}
    lines = ["## Programs outside the corpus", "",
             "Programs no corpus family builds, timed by the benches (`bench/`; the library "
             "programs call Haiku, Flax, Optax, Diffrax, Equinox, Optimistix, NumPyro and "
             "BlackJAX; the outside-libraries programs call eleven libraries no training row "
             "uses, jraph to mctx, each measured in a fresh process as sweeps measure), "
             "scored from their stored model inputs; predictions are scaled as `costmodel "
             "calibrate` scales them on the run's machine (the model ratio of the "
             "calibration taken before the programs; the library and unseen benches, "
             "which kept none, by their reference time).", "",
             *_score_table(artifact, results, "compile_seconds")]
    if memory:
        lines += ["Peak host memory of the programs each measured in a fresh process (the "
                  "outside-libraries runs, and `bench/evaluations/bench_memory.py` for the library and "
                  "unseen programs, which are timed together in one process):", "",
                  *_score_table(artifact, memory, "peak_rss_bytes")]
    return lines


def _score_table(artifact, results: dict[str, dict], quantity: str) -> list[str]:
    lines = ["| bench | programs | median fold | max fold | within 2x | Spearman "
             "| 90% coverage |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, data in results.items():
        s = score(artifact, data, quantity)
        skipped = f" ({s['skipped']} did not lower)" if s["skipped"] else ""
        lines.append(f"| {name} | {s['n']}{skipped} | {s['median_fold']:.2f} | "
                     f"{s['max_fold']:.2f} | {s['within_2x']:.2f} | {s['spearman']:.2f} | "
                     f"{s['coverage']:.2f} |")
    return lines + [""]
