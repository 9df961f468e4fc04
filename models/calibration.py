"""This machine's calibration, as predictions read it: compile-time scales from a file.

`costmodel calibrate` (`costmodel.training.measure.calibrate`) times the calibration set here and
writes the file (`$COSTMODEL_CALIBRATION`, else `~/.cache/costmodel/calibration.json`)
with one scale for every program and how unsure it is; the other candidates and part
factors it records beside are not applied. Predictions read it here, once per change of
the file.

A TPU calibration (`costmodel calibrate --backend tpu`, `training.measure.tpu_calibrate`)
is kept in the same file under `"tpu"` and its chip (`{"tpu": {"v5e": record}}`), beside
the CPU record, and each command rewrites only its own part. It describes the TPU VM's
host the user compiles on, not the machine predicting, so it applies to every prediction
for that chip (its topologies too) wherever it is made, and to no CPU prediction.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from costmodel.features.environment import cpu_model, host_cpu_count

ENV_PATH = "COSTMODEL_CALIBRATION"


@dataclass(frozen=True)
class Calibration:
    """How much slower this machine compiles than the training machine.

    Attributes:
        scale: The factor on every compile-time prediction.
        log_uncertainty: How unsure the scale is, in log seconds (0: sure): the log of
            how far calibration's ways of measuring this machine disagreed beyond what
            they usually do; it widens compile-time intervals (`widen_interval`).
    """

    scale: float = 1.0
    log_uncertainty: float = 0.0


UNCALIBRATED = Calibration()


def widen_interval(point: float, low: float, high: float,
                   log_uncertainty: float) -> tuple[float, float]:
    """An interval widened by a calibration's uncertainty.

    The model's interval and the calibration's error are independent, so their log
    widths add in quadrature: each side's log distance from the point, `w`, becomes
    `sqrt(w**2 + log_uncertainty**2)`. That multiplies the side's log width by
    `sqrt(1 + (log_uncertainty / w)**2)`, and moves the bound out by at most a factor
    `exp(log_uncertainty)`; an uncertainty of 0 (the candidates agreed) changes nothing.

    Example:
        >>> widen_interval(1.0, 0.5, 2.0, 0.0)
        (0.5, 2.0)
        >>> [round(v, 3) for v in widen_interval(1.0, 0.5, 2.0, math.log(2) * 0.75)]
        [0.42, 2.378]
    """
    if not (log_uncertainty > 0 and 0 < low <= point <= high and math.isfinite(high)):
        return low, high
    down, up = math.log(point / low), math.log(high / point)
    return (point * math.exp(-math.hypot(down, log_uncertainty)),
            point * math.exp(math.hypot(up, log_uncertainty)))


def calibration_path() -> Path:
    """Where this machine's calibration lives: `$COSTMODEL_CALIBRATION` or the user cache."""
    configured = os.environ.get(ENV_PATH, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "costmodel" / "calibration.json"


def load_calibration(path: Path | None = None, backend: str = "cpu",
                     target: str = "") -> Calibration:
    """The calibration predictions for (backend, target) apply; none (factor 1) when never
    calibrated, or calibrated elsewhere.

    CPU (and GPU, whose compiles run on this machine's CPU too): a record from another
    CPU model or core count (a home folder shared between machines) does not apply here.
    TPU: the record of the target's chip (`v5e` for `v5e:4x4`), whatever machine
    predicts. An unreadable or non-positive one never applies.
    """
    path = Path(path) if path is not None else calibration_path()
    try:
        stamp = path.stat()
    except OSError:
        return UNCALIBRATED
    tpu = backend == "tpu"
    return _read(str(path), stamp.st_mtime_ns, stamp.st_size, "tpu" if tpu else "cpu",
                 target.split(":")[0] if tpu else "")


def read_file(path: Path) -> dict:
    """The calibration file's whole content; {} when missing or unreadable."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def save_record(record: dict, path: Path, backend: str = "cpu", chip: str = "") -> None:
    """Write `record` into the calibration file at `path` as the calibration of `backend`
    (and TPU `chip`), keeping every other backend's and chip's record there."""
    whole = read_file(path)
    if backend == "tpu":
        if not chip:
            raise ValueError("a TPU calibration is saved under its chip")
        tpu = whole.get("tpu") if isinstance(whole.get("tpu"), dict) else {}
        whole = {**whole, "tpu": {**tpu, chip: record}}
    elif backend == "cpu":
        whole = {**record, **({"tpu": whole["tpu"]} if "tpu" in whole else {})}
    else:
        raise ValueError(f"no calibration is kept for backend {backend!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(whole, indent=2) + "\n")
    tmp.replace(path)  # a prediction reading meanwhile sees the old file or the new one


@lru_cache(maxsize=16)
def _read(path: str, _mtime_ns: int, _size: int, backend: str, chip: str) -> Calibration:
    record = read_file(Path(path))
    if backend == "tpu":
        chips = record.get("tpu")
        record = chips.get(chip) if isinstance(chips, dict) else None
    try:
        scale = float(record["scale"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return UNCALIBRATED
    if backend == "cpu" and record.get("cpu_model") not in (None, cpu_model()):
        return UNCALIBRATED
    if backend == "cpu" and record.get("cpu_count") not in (None, host_cpu_count()):
        return UNCALIBRATED
    if not (scale > 0 and math.isfinite(scale)):
        return UNCALIBRATED
    try:
        uncertainty = float(record.get("log_uncertainty") or 0.0)
    except (ValueError, TypeError):
        uncertainty = 0.0
    # an unreadable or negative uncertainty leaves the intervals as fitted
    return Calibration(scale, uncertainty if 0 < uncertainty < math.inf else 0.0)
