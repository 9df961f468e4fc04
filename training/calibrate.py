"""Per-machine calibration: how fast this machine compiles relative to the training machine.

Every training row timed the fixed reference program next to its own compile, and the
default model's manifest records the median (`reference_seconds`). Timing the same
program here, in a fresh process with the compilation cache off, gives the ratio by
which predicted compile seconds scale on this machine. The result is kept in a small
JSON file (`$COSTMODEL_CALIBRATION`, else `~/.cache/costmodel/calibration.json`).

Run `python -m costmodel.training.calibrate` once per machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from costmodel.features.environment import cpu_model
from costmodel.models.calibration import calibration_path

from .child import RESULT_PREFIX

MIN_REPEATS = 3
MAX_REPEATS = 25
START_UP_SECONDS = 120.0  # interpreter, jax import and backend start before the budget runs


def time_reference(seconds_budget: float = 60.0, backend: str = "cpu",
                   target: str = "") -> list[float]:
    """Compile seconds of the reference program, repeated in a fresh process.

    A warm-up compile comes first (backend and LLVM start-up, as in the harness), then
    repeats until `seconds_budget` is spent (at least 3, at most 25).
    """
    spec = {"seconds_budget": seconds_budget, "backend": backend, "target": target}
    proc = subprocess.run([sys.executable, "-m", "costmodel.training.calibrate", "--child"],
                          input=json.dumps(spec), capture_output=True, text=True,
                          timeout=seconds_budget + START_UP_SECONDS)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])["seconds"]
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
    raise RuntimeError(f"calibration process exited {proc.returncode}: {tail}")


def calibrate(seconds_budget: float = 60.0, *, reference_seconds: float | None = None,
              path: Path | None = None) -> dict:
    """Time the reference program here and store `scale = here / training machine`.

    Args:
        seconds_budget: Seconds to spend on repeats (start-up comes on top).
        reference_seconds: Training machine's reference median; default: from the
            manifest of the default CPU model (read without loading the estimator).
        path: Calibration file to write; default: `calibration_path()`.

    Returns:
        The stored record (scale, measured_at, cpu_model, the two reference medians, ...)
        and the `path` it was stored at.

    Example:
        >>> calibrate(30)["scale"]
        1.27
    """
    from costmodel.models import default_path, verify

    model_version = None
    if reference_seconds is None:
        manifest = verify(default_path("cpu"))
        reference_seconds = manifest.get("reference_seconds")
        model_version = manifest["version"]
        if not reference_seconds:
            raise ValueError(f"the default model {model_version} records no reference_seconds")
    times = time_reference(seconds_budget)
    here = statistics.median(times)
    record = {
        "scale": here / reference_seconds,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count() or 1,
        "reference_seconds_here": here,
        "reference_seconds_model": reference_seconds,
        "model_version": model_version,
        "repeats": len(times),
        "spread": (max(times) - min(times)) / here if here > 0 else 0.0,
    }
    path = Path(path) if path is not None else calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return {**record, "path": str(path)}


def _child() -> int:
    """The measuring side: configure like a measurement process, time, print one line."""
    from .child import configure

    spec = json.loads(sys.stdin.read())
    configure(spec)
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    from .harness import CompileEvents, compile_once, placement
    from .reference import build_reference

    events = CompileEvents()
    place = placement(spec.get("backend", "cpu"), spec.get("target", ""))
    compile_once(build_reference, place, events)  # warm-up, not timed
    deadline = time.monotonic() + float(spec["seconds_budget"])
    seconds: list[float] = []
    while len(seconds) < MIN_REPEATS or (time.monotonic() < deadline
                                         and len(seconds) < MAX_REPEATS):
        seconds.append(compile_once(build_reference, place, events)[1])
    sys.stdout.write(RESULT_PREFIX + json.dumps({"seconds": seconds}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Calibrate compile-time predictions here.")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=60.0, help="time budget for repeats")
    args = parser.parse_args(argv)
    if args.child:
        return _child()
    record = calibrate(args.seconds)
    sys.stdout.write(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
