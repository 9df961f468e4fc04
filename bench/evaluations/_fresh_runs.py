"""Programs measured one at a time in fresh processes, as sweeps measure them, between two
`costmodel calibrate` runs on this machine (before and after, to see its drift).

Each row is appended the moment it is measured, so an interrupted run resumes where it
stopped; the measured rows are read back from those JSON lines or from their compacted
parquet (`costmodel export`), which is what gets committed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from costmodel.measure.rows import program_key
from costmodel.training.fitting.fit import select_rows
from costmodel.training.measure.calibrate import calibrate
from costmodel.training.measure.runner import close_zygotes
from costmodel.training.measure.sweep import measure_program
from costmodel.training.store import dataset

MEASURED = "measured.jsonl"  # or measured.parquet, compacted
CALIBRATION_BEFORE, CALIBRATION_AFTER = "calibration_before.json", "calibration_after.json"


def measured_keys(out: Path) -> set[str]:
    path = out / MEASURED
    if not path.exists():
        return set()
    return {json.loads(line)["key"] for line in path.read_text().splitlines() if line.strip()}


def measure_between_calibrations(out: Path, programs: Sequence[tuple[str, dict]],
                                 model, rounds: int, modules: tuple[str, ...] = (),
                                 timeout: float = 600.0) -> None:
    """Calibrate against `model` (an Artifact: its predictions of the set give the model
    ratio `costmodel calibrate` applies) unless a run already did, measure each `(family,
    params)` not measured yet with three repeats in its own process, then calibrate again.
    `modules` register families the corpus does not (imported by each measurement process
    too)."""
    if not (out / CALIBRATION_BEFORE).exists():
        calibrate(path=out / CALIBRATION_BEFORE, model=model, rounds=rounds)
    measure_rows(out, programs, modules=modules, timeout=timeout)
    calibrate(path=out / CALIBRATION_AFTER, model=model, rounds=rounds)


def measure_rows(out: Path, programs: Sequence[tuple[str, dict]], backend: str = "cpu",
                 target: str = "", modules: tuple[str, ...] = (), timeout: float = 600.0) -> None:
    """Measure each `(family, params)` not measured yet into `out`, for CPU or a GPU
    target (deviceless where no GPU is present), three repeats in its own process."""
    path = out / MEASURED
    done = measured_keys(out)
    todo = [(family, params) for family, params in programs
            if program_key(family, params, backend, target) not in done]
    try:
        for family, params in tqdm(todo, desc="measure", unit="prog"):
            row = measure_program(family, params, backend, target, timeout=timeout,
                                  memory_limit=16 << 30, max_repeats=3, modules=modules)
            with path.open("a") as handle:
                handle.write(json.dumps(row, default=str) + "\n")
    finally:
        close_zygotes()


def read_measured(out: Path, backend: str = "cpu", target: str = "") -> pd.DataFrame:
    """The ok rows measured into `out` for (backend, target): its JSON lines, or their
    compacted parquet."""
    compacted = out / MEASURED.replace(".jsonl", ".parquet")
    rows = dataset.load([compacted if compacted.exists() else out / MEASURED])
    return select_rows(rows, backend, target)
