"""Per-machine calibration: how fast this machine compiles relative to the training
machine, as one factor for every prediction.

The calibration set (`corpus/calibration.py`: five programs, about a minute a round here)
is measured here the way sweeps measure, each program in a fresh process with the
compilation cache off, the reference program timed beside it, and one traced compile for
its phases. The factor applied is the reference program's speed here, as those processes
timed it, over the model's median reference, to the model's reference power: the model
divides each training row's drift out the same way (`(row ref / median ref) ** power`),
so another machine is carried as the training machine at another reference speed.

The set's own programs are recorded beside, with one factor per part of the compile (HLO
passes, backend, the rest) fitted so the parts add up to each program's compile here.
They are not applied: on 94 real programs measured on a second CPU kind, and on this
machine pinned to one core, factors from the set's programs did no better than the
reference speed, and programs' ratios between the machines did not follow their predicted
phase shares (`bench/evaluations/cross_machine.py`, `bench/evaluations/calibration_effect.py`). A model whose
manifest lacks the reference power is scaled by the median of the set's ratios instead.
The record goes to a small JSON file (`$COSTMODEL_CALIBRATION`, else
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

from costmodel.features.environment import cpu_model, host_cpu_count
from costmodel.models.calibration import calibration_path
from costmodel.models.phase_shares import PARTS

from ..corpus.calibration import FAMILY, PROGRAMS
from .phases import part_seconds

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
    """Each calibration program measured here in a fresh process, as sweeps measure."""
    from .runner import run_child

    out = {}
    for program in programs:
        spec = {"family": FAMILY, "params": {"program": program}, "backend": "cpu",
                "target": "", "max_repeats": max_repeats}
        result = run_child(spec, timeout=TIMEOUT_SECONDS)
        if result.get("status") != "ok":
            raise RuntimeError(f"calibration program {program!r} did not compile here: "
                               f"{result.get('status')}: {result.get('message')}")
        out[program] = summary(result)
        if progress:
            progress(program)
    return out


def combine_rounds(rounds: Sequence[Mapping[str, dict]]) -> dict[str, dict]:
    """One figure per program from several rounds of the set: the median of its rounds'
    seconds, reference seconds and parts (parts only where every round traced them)."""
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
            else {k: statistics.median(p[k] for p in parts) for k in parts[0]}}
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


def applied_scale(reference_here: float | None, set_scale: float,
                  manifest: Mapping) -> tuple[float, str]:
    """The factor predictions apply and where it comes from: the reference speed, or the
    set's median ratio for a model that records no reference (`reference_speed_scale`)."""
    speed = reference_speed_scale(reference_here, manifest.get("reference_seconds"),
                                  manifest.get("reference_power"))
    return (set_scale, "calibration_set") if speed is None else (speed, "reference_speed")


def calibrate(*, path: Path | None = None, manifest: Mapping | None = None,
              progress: Callable[[str], None] | None = None, rounds: int = ROUNDS) -> dict:
    """Measure the calibration set here and store this machine's factors.

    Args:
        path: Calibration file to write; default: `calibration_path()`.
        manifest: The model manifest to calibrate against; default: the shipped CPU
            model's (read without loading the model).
        progress: Called with each program's name once it is measured (once a round).
        rounds: Times the whole set is measured, one round after the other; each
            program's figure is the median of its rounds (`combine_rounds`).

    Returns:
        The stored record (the scale applied and where it came from, the reference
        timings, the set's median ratio and part factors, both machines' figures per
        program, cpu model and count, ...) and the `path` it was stored at.

    Example:
        >>> calibrate()["scale"], calibrate()["scale_from"]
        (1.08, 'reference_speed')
    """
    if manifest is None:
        from costmodel.models import default_path, verify

        manifest = verify(default_path("cpu"))
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
    set_scale, parts = part_scales(here, training)
    reference_here = median_reference(here)
    scale, scale_from = applied_scale(reference_here, set_scale, manifest)
    record = {
        "scale": scale,
        "scale_from": scale_from,
        "reference_seconds": {"here": reference_here, "model": manifest.get("reference_seconds")},
        "set_scale": set_scale,
        "part_scales": parts,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": host_cpu_count(),
        "model_version": manifest.get("version"),
        "programs": {p: {"here": here[p], "training": training[p]} for p in here},
    }
    path = Path(path) if path is not None else calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return {**record, "path": str(path)}
