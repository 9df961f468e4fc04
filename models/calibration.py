"""This machine's calibration, as predictions read it: a compile-time scale from a file.

`costmodel calibrate` (`costmodel.training.calibrate`) measures it and writes the file
(`$COSTMODEL_CALIBRATION`, else `~/.cache/costmodel/calibration.json`). Predictions read
it here, once per change of the file, not on every call.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from costmodel.features.environment import cpu_model

ENV_PATH = "COSTMODEL_CALIBRATION"


def calibration_path() -> Path:
    """Where this machine's calibration lives: `$COSTMODEL_CALIBRATION` or the user cache."""
    configured = os.environ.get(ENV_PATH, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "costmodel" / "calibration.json"


def load_calibration(path: Path | None = None) -> float:
    """This machine's compile-time scale; 1.0 when never calibrated or calibrated elsewhere.

    A record whose CPU model differs from this machine's (a home folder shared between
    machines) does not apply here, and neither does an unreadable or non-positive one.
    """
    path = Path(path) if path is not None else calibration_path()
    try:
        stamp = path.stat()
    except OSError:
        return 1.0
    return _scale(str(path), stamp.st_mtime_ns, stamp.st_size)


@lru_cache(maxsize=8)
def _scale(path: str, _mtime_ns: int, _size: int) -> float:
    try:
        record = json.loads(Path(path).read_text())
        scale = float(record["scale"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1.0
    if record.get("cpu_model") not in (None, cpu_model()) or not scale > 0:
        return 1.0
    return scale
