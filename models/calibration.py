"""This machine's calibration, as predictions read it: compile-time scales from a file.

`costmodel calibrate` (`costmodel.training.measure.calibrate`) times the calibration set here and
writes the file (`$COSTMODEL_CALIBRATION`, else `~/.cache/costmodel/calibration.json`)
with one scale for every program; the part factors it records beside are not applied.
Predictions read it here, once per change of the file.
"""

from __future__ import annotations

import json
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
    """

    scale: float = 1.0


UNCALIBRATED = Calibration()


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
    if not scale > 0:
        return UNCALIBRATED
    return Calibration(scale)
