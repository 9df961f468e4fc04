"""Per-machine calibration: how fast this machine compiles relative to the model, as one
factor for every prediction.

The calibration set (`corpus/calibration.py`: five programs, about a minute a round here)
is measured here the way sweeps measure, each program in a fresh process with the
compilation cache off, the reference program timed beside it, and one traced compile for
its phases. The record keeps several ways of turning that into one factor (`candidates`):

- `model_ratio` (applied, times `APPLIED_FACTOR`): the median over the set's programs of
  their compile here over the model's own prediction of them (from the features their
  processes extracted here);
- `reference_speed`: the reference timings beside the set's programs over the model's
  median reference, to the model's reference power (the model divides each training
  row's drift out the same way);
- `calibration_set`: the median of the programs' compiles here over the training
  machine's (brought to the model's reference speed);
- `reference_only`: the reference program's compile here over the training machine's.

The factor applied is the model ratio times 1.07: on 11 stored runs (held-out programs
measured on another CPU kind and outside libraries' programs, 25 calibrations;
`bench/evaluations/calibration_choice.py`) that constant, fitted with each run left out,
left the least bias on held-out programs in root mean square (1.11x, worst 1.28x) against
the bare ratio's 1.14x (worst 1.37x), the reference speed's 1.14x (1.28x) and the set's
1.20x (1.60x); fitted on all the runs it is 1.09 since feature schema 19 (1.07 before).
Without a model to predict with, the reference speed is applied, and without a reference
power the set's median. How far the candidates disagree (`candidate_spread`) is the calibration's
uncertainty: past `AGREEING_SPREAD` it widens the prediction intervals
(`costmodel.models.calibration.widen_interval`).

The set's own programs are recorded beside, with one factor per part of the compile (HLO
passes, backend, the rest) fitted so the parts add up to each program's compile here.
They are not applied: on 94 real programs measured on a second CPU kind, and on this
machine pinned to one core, they did no better than the reference speed, and programs'
ratios between the machines did not follow their predicted phase shares
(`bench/evaluations/cross_machine.py`, `bench/evaluations/calibration_effect.py`). The
record goes to a small JSON file (`$COSTMODEL_CALIBRATION`, else
`~/.cache/costmodel/calibration.json`).

Run `costmodel calibrate` once per machine.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES
from costmodel.features.environment import cpu_model, host_cpu_count
from costmodel.features.schema import with_added
from costmodel.measure.phases import part_seconds
from costmodel.models.calibration import calibration_path, save_record
from costmodel.models.phase_shares import PARTS

from ..corpus.calibration import FAMILY, PROGRAMS

TIMEOUT_SECONDS = 300.0
# how far the part factors may stray from the overall one: each part is seen in few
# programs, so an unpenalised fit chases their noise
PART_RIDGE = 0.3
# of the shares a part must have in a program for that program to tell its factor
MIN_PART_SHARE = 0.1
# Rounds of the set a calibration measures. This machine's speed drifts from minute to
# minute with every program in step: on a 2-core AMD EPYC, six single rounds minutes apart
# gave overall factors 0.90-1.16; two rounds pooled, 0.96 and 1.06.
ROUNDS = 3

MODEL_RATIO, REFERENCE_SPEED, CALIBRATION_SET, REFERENCE_ONLY = (
    "model_ratio", "reference_speed", "calibration_set", "reference_only")
# The first of these a calibration has is applied (see the module's docstring).
PREFERENCE = (MODEL_RATIO, REFERENCE_SPEED, CALIBRATION_SET)
# What the applied way is multiplied by: the model predicts the set's programs, which it
# trained on, closer than programs it never saw, so over the 25 stored calibrations of 11
# runs those needed 1.07x the bare model ratio (`calibration_choice.py`'s
# `model_ratio_times_constant`, fitted with each run left out), a test holds it there.
APPLIED_FACTOR = {MODEL_RATIO: 1.07}
# Candidates whose disagreement says how sure a calibration is: the reference program
# alone and the part factors lean on one program or one part, and the fold program
# always reads slow here, so they would make every calibration look unsure.
SPREAD_OF = (MODEL_RATIO, REFERENCE_SPEED, CALIBRATION_SET)
# Max/min of those candidates up to which they count as agreeing: a little above the
# median of the 25 stored calibrations (1.02-1.34, median 1.12; 16 agree), whose
# disagreement the fitted 90% intervals already lived with on the held-out programs
# timed after them.
AGREEING_SPREAD = 1.15
# What each way that can be applied left on held-out programs of stored runs (geometric
# mean of predicted over measured per calibration, lowest and highest) and over how many
# calibrations and runs: `bench/evaluations/calibration_choice.py`, whose result a test holds these to.
HELD_OUT_BIAS = {MODEL_RATIO: (0.78, 1.17), REFERENCE_SPEED: (0.78, 1.22),
                 CALIBRATION_SET: (0.63, 1.01)}
HELD_OUT_CALIBRATIONS, HELD_OUT_RUNS = 25, 11


def summary(row: Mapping) -> dict | None:
    """What calibration compares of one measurement (a sweep row or a child's result):
    compile seconds, the reference's, and the parts (None when not traced)."""
    seconds = float(row["compile_seconds"])
    ref = row.get("ref_seconds")
    return {"compile_seconds": seconds,
            "ref_seconds": None if ref is None or not math.isfinite(float(ref)) else float(ref),
            "parts": part_seconds(row)}


def training_set(rows: pd.DataFrame, reference_seconds: float | None,
                 reference_power: float) -> dict[str, dict]:
    """The training machine's calibration figures from its rows of the calibration set:
    the latest ok row per program, its seconds brought to the model's reference speed
    (`(reference_seconds / row ref) ** reference_power`, as the model normalises)."""
    if not {"family", "status", "params", "measured_at"} <= set(rows.columns):
        return {}
    ok = rows[(rows["family"] == FAMILY) & (rows["status"] == "ok")]
    out = {}
    for record in ok.sort_values("measured_at").to_dict("records"):
        params = record["params"]
        program = (json.loads(params) if isinstance(params, str) else params)["program"]
        measured = summary(record)
        factor = 1.0
        if reference_seconds and measured["ref_seconds"]:
            factor = (reference_seconds / measured["ref_seconds"]) ** reference_power
        out[program] = {"compile_seconds": measured["compile_seconds"] * factor,
                        "parts": None if measured["parts"] is None else
                        {k: v * factor for k, v in measured["parts"].items()}}
    return out


def measure_set(programs: Sequence[str] = tuple(PROGRAMS), max_repeats: int = 3,
                progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Each calibration program measured here in a fresh process, as sweeps measure: its
    `summary` and the model inputs of the features that process extracted."""
    from .runner import run_child

    out = {}
    for program in programs:
        spec = {"family": FAMILY, "params": {"program": program}, "backend": "cpu",
                "target": "", "max_repeats": max_repeats}
        result = run_child(spec, timeout=TIMEOUT_SECONDS)
        if result.get("status") != "ok":
            raise RuntimeError(f"calibration program {program!r} did not compile here: "
                               f"{result.get('status')}: {result.get('message')}")
        features = result.get("features") or {}
        out[program] = {**summary(result), "model_inputs": {
            name: float("nan") if features.get(name) is None else float(features[name])
            for name in MODEL_FEATURES} if features else None}
        if progress:
            progress(program)
    return out


def combine_rounds(rounds: Sequence[Mapping[str, dict]]) -> dict[str, dict]:
    """One figure per program from several rounds of the set: the median of its rounds'
    seconds, reference seconds and parts (parts only where every round traced them), and
    its model inputs."""
    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    out = {}
    for program in rounds[0]:
        seen = [r[program] for r in rounds if program in r]
        parts = [s["parts"] for s in seen]
        out[program] = {
            "compile_seconds": median(s["compile_seconds"] for s in seen),
            "ref_seconds": median(s["ref_seconds"] for s in seen),
            "parts": None if any(p is None for p in parts)
            else {k: statistics.median(p[k] for p in parts) for k in parts[0]},
            # the same program's features in every round: the first round's
            "model_inputs": seen[0].get("model_inputs")}
    return out


def part_scales(here: Mapping[str, dict], training: Mapping[str, dict]
                ) -> tuple[float, dict[str, float] | None]:
    """(overall factor, factor per part): the overall one the median of the programs'
    ratios; the parts' fitted so that each program's training parts, scaled, give its
    seconds here (least squares in log seconds, held near the overall factor)."""
    from scipy.optimize import least_squares

    common = [p for p in here if p in training]
    if not common:
        raise ValueError("no calibration program measured both here and for the model")
    ratios = [math.log(here[p]["compile_seconds"] / training[p]["compile_seconds"])
              for p in common]
    overall = statistics.median(ratios)
    traced = [p for p in common if training[p]["parts"]]
    if len(traced) < len(PARTS):
        return math.exp(overall), None
    parts = np.array([[training[p]["parts"][k] for k in PARTS] for p in traced])
    seen = (parts / parts.sum(axis=1, keepdims=True)).max(axis=0) >= MIN_PART_SHARE
    measured = np.log([here[p]["compile_seconds"] for p in traced])

    log_scales = np.full(len(PARTS), overall)  # a part no program leans on keeps it

    def residual(free: np.ndarray) -> np.ndarray:
        log_scales[seen] = free
        fit = np.log(parts @ np.exp(log_scales)) - measured
        return np.concatenate([fit, PART_RIDGE * (free - overall)])

    log_scales[seen] = least_squares(residual, np.full(int(seen.sum()), overall)).x
    return math.exp(overall), {k: float(math.exp(v)) for k, v in zip(PARTS, log_scales)}


def median_reference(here: Mapping[str, dict]) -> float | None:
    """The reference compile's seconds here: the median of the timings taken beside the
    calibration's programs, in their processes (as sweeps time each row's)."""
    refs = [f["ref_seconds"] for f in here.values() if f.get("ref_seconds")]
    return statistics.median(refs) if refs else None


def reference_speed_scale(reference_here: float | None, reference_seconds: float | None,
                          reference_power: float | None) -> float | None:
    """The factor for every program: the reference's seconds here over the model's median
    reference, to the model's power; None without either timing, or with a power of 0
    (a model that found no drift to divide out carries nothing by its reference)."""
    if not (reference_here and reference_seconds and reference_power and reference_power > 0):
        return None
    return (reference_here / reference_seconds) ** reference_power


def predicted_set(here: Mapping[str, dict], model) -> dict[str, float]:
    """The model's compile seconds for each program measured here that carries its model
    inputs (the features its measuring process extracted); {} when none does."""
    programs = [p for p, f in here.items() if f.get("model_inputs")]
    if not programs:
        return {}
    points = model.predict([with_added(here[p]["model_inputs"])
                            for p in programs])["compile_seconds"]["point"]
    return {p: float(v) for p, v in zip(programs, points) if math.isfinite(v) and v > 0}


def model_ratio_scale(here: Mapping[str, dict], predicted: Mapping[str, float]) -> float | None:
    """The median over programs of their compile seconds here over the model's prediction
    of them: the factor that makes the model's own predictions of the set right here.

    Example:
        >>> model_ratio_scale({"a": {"compile_seconds": 2.0}, "b": {"compile_seconds": 0.3},
        ...                    "c": {"compile_seconds": 1.0}}, {"a": 1.0, "b": 0.5, "c": 1.25})
        0.8
    """
    ratios = [here[p]["compile_seconds"] / predicted[p] for p in here if p in predicted]
    return float(statistics.median(ratios)) if ratios else None


def candidates(here: Mapping[str, dict], training: Mapping[str, dict], manifest: Mapping,
               predicted: Mapping[str, float] | None = None) -> dict[str, float | None]:
    """Every way of calibrating from one measurement of the set here (the module's
    docstring names them); None where this calibration lacks what a way needs."""
    reference = (here.get("reference"), training.get("reference"))
    return {
        MODEL_RATIO: model_ratio_scale(here, predicted or {}),
        REFERENCE_SPEED: reference_speed_scale(median_reference(here),
                                               manifest.get("reference_seconds"),
                                               manifest.get("reference_power")),
        CALIBRATION_SET: part_scales(here, training)[0],
        REFERENCE_ONLY: None if None in reference else
        reference[0]["compile_seconds"] / reference[1]["compile_seconds"]}


def applied(way: str, value: float) -> float:
    """What predictions are scaled by when `way` gives `value`: times its `APPLIED_FACTOR`."""
    return float(value) * APPLIED_FACTOR.get(way, 1.0)


def choose_scale(ways: Mapping[str, float | None]) -> tuple[float, str]:
    """The factor predictions apply and which way it comes from: the first of `PREFERENCE`
    this calibration has, `applied`."""
    for way in PREFERENCE:
        if ways.get(way):
            return applied(way, ways[way]), way
    raise ValueError("no way of calibrating applies: " + ", ".join(map(str, ways)))


def candidate_spread(ways: Mapping[str, float | None]) -> float:
    """Max over min of the `SPREAD_OF` candidates this calibration has (1 for fewer than
    two): how far the ways of calibrating disagree."""
    values = [ways[w] for w in SPREAD_OF if ways.get(w)]
    return max(values) / min(values) if len(values) > 1 else 1.0


def log_uncertainty(spread: float) -> float:
    """How much a calibration widens prediction intervals, in log seconds: the log of its
    candidates' spread past `AGREEING_SPREAD`, 0 when they agree
    (`costmodel.models.calibration.widen_interval` applies it)."""
    return max(0.0, math.log(spread / AGREEING_SPREAD))


def confidence(record: Mapping) -> str:
    """One line saying how sure a calibration record is: its candidates' spread, whether
    that widens intervals, and the held-out bias the applied way left on stored runs."""
    ways = record["candidates"]
    named = ", ".join(f"{w.replace('_', ' ')} {ways[w]:.2f}" for w in SPREAD_OF if ways.get(w))
    widened = record["log_uncertainty"]
    verdict = ("they agree, intervals as fitted" if not widened else
               f"they disagree, so each bound of a 90% interval moves out by up to "
               f"{math.exp(widened):.2f}x")
    applied = record["scale_from"]
    low, high = HELD_OUT_BIAS[applied]
    return (f"how sure: the ways of calibrating are {record['spread']:.2f}x apart ({named}); "
            f"{verdict}; on {HELD_OUT_CALIBRATIONS} stored calibrations of {HELD_OUT_RUNS} runs "
            f"the {applied.replace('_', ' ')} left held-out programs predicted "
            f"{low:.2f}-{high:.2f}x their compile")


def calibrate(*, path: Path | None = None, manifest: Mapping | None = None, model=None,
              progress: Callable[[str], None] | None = None, rounds: int = ROUNDS) -> dict:
    """Measure the calibration set here and store this machine's factor.

    Args:
        path: Calibration file to write; default: `calibration_path()`.
        manifest: The model manifest to calibrate against; default: `model`'s.
        model: The model (`costmodel.models.Artifact`) whose predictions of the set the
            model ratio divides by; default: the shipped CPU model when no manifest is
            given, none (no model ratio) when only a manifest is.
        progress: Called with each program's name once it is measured (once a round).
        rounds: Times the whole set is measured, one round after the other; each
            program's figure is the median of its rounds (`combine_rounds`).

    Returns:
        The stored record (the scale applied and which way it comes from, every
        candidate, their spread and the log uncertainty it gives intervals, the reference
        timings, the set's part factors, both machines' figures and the model's
        prediction per program, cpu model and count, ...) and the `path` it was stored at.

    Example:
        >>> record = calibrate()
        >>> record["scale"], record["scale_from"], record["spread"]
        (0.74, 'model_ratio', 1.18)
    """
    if model is None and manifest is None:
        from costmodel.models import load_default

        model = load_default("cpu")
    if manifest is None:
        manifest = model.manifest
    training = manifest.get("calibration_set") or {}
    if not training:  # a model from before the calibration set: its reference alone
        reference = manifest.get("reference_seconds")
        if not reference:
            raise ValueError(f"model {manifest.get('version')} records neither a "
                             "calibration set nor reference_seconds")
        training = {"reference": {"compile_seconds": reference, "parts": None}}
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    programs = [p for p in PROGRAMS if p in training]
    here = combine_rounds([measure_set(programs, progress=progress) for _ in range(rounds)])
    predicted = predicted_set(here, model) if model is not None else {}
    here = {p: {k: v for k, v in f.items() if k != "model_inputs"} for p, f in here.items()}
    set_scale, parts = part_scales(here, training)
    ways = candidates(here, training, manifest, predicted)
    scale, scale_from = choose_scale(ways)
    spread = candidate_spread(ways)
    record = {
        "scale": scale,
        "scale_from": scale_from,
        "candidates": ways,
        "spread": spread,
        "log_uncertainty": log_uncertainty(spread),
        "reference_seconds": {"here": median_reference(here),
                              "model": manifest.get("reference_seconds")},
        "set_scale": set_scale,
        "part_scales": parts,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": host_cpu_count(),
        "model_version": manifest.get("version"),
        "programs": {p: {"here": here[p], "training": training[p],
                         "predicted": predicted.get(p)} for p in here},
    }
    path = Path(path) if path is not None else calibration_path()
    save_record(record, path, "cpu")  # a TPU chip's record in the file stays
    return {**record, "path": str(path)}
