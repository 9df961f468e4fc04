"""This machine's calibration, as predictions read it: compile-time scales from a file.

`costmodel calibrate` (`costmodel.training.measure.calibrate`) times the calibration set here and
writes the file (`$COSTMODEL_CALIBRATION`, else `~/.cache/costmodel/calibration.json`)
with one scale for every program and how unsure it is; the other candidates and part
factors it records beside are not applied. Predictions read it here, once per change of
the file.
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


def load_calibration(path: Path | None = None) -> Calibration:
    """This machine's calibration; none (factor 1) when never calibrated or calibrated
    elsewhere.

    A record from another CPU model or core count (a home folder shared between machines)
    does not apply here, and neither does an unreadable or non-positive one.
    """
    path = Path(path) if path is not None else calibration_path()
    try:
        stamp = path.stat()
    except OSError:
        return UNCALIBRATED
    return _read(str(path), stamp.st_mtime_ns, stamp.st_size)


@lru_cache(maxsize=8)
def _read(path: str, _mtime_ns: int, _size: int) -> Calibration:
    try:
        record = json.loads(Path(path).read_text())
        scale = float(record["scale"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return UNCALIBRATED
    if record.get("cpu_model") not in (None, cpu_model()):
        return UNCALIBRATED
    if record.get("cpu_count") not in (None, host_cpu_count()):
        return UNCALIBRATED
    if not (scale > 0 and math.isfinite(scale)):
        return UNCALIBRATED
    try:
        uncertainty = float(record.get("log_uncertainty") or 0.0)
    except (ValueError, TypeError):
        uncertainty = 0.0
    # an unreadable or negative uncertainty leaves the intervals as fitted
    return Calibration(scale, uncertainty if 0 < uncertainty < math.inf else 0.0)
