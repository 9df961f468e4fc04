"""`kill -9` in the middle of a sweep, then the same command again: exactly the planned
programs, none twice, none lost."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from costmodel.training.measure.sweep import SweepConfig, plan
from costmodel.training.store import dataset

pytestmark = pytest.mark.slow  # runs and kills a sweep

TINY = str(Path(__file__).with_name("tiny_family.py"))
LIMIT = 3  # of the tiny family's 4 programs


def sweep_command(out: Path) -> list[str]:
    return [sys.executable, "-m", "costmodel.cli", "sweep", "--families", "tiny_test",
            "--module", TINY, "--out", str(out), "--limit", str(LIMIT), "--json"]


def rows_on_disk(out: Path) -> int:
    return sum(len(dataset.read_jsonl(f)) for f in out.glob("*.jsonl"))


def kill_after_first_row(out: Path, deadline_s: float = 120.0) -> None:
    proc = subprocess.Popen(sweep_command(out), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        started = time.monotonic()
        while rows_on_disk(out) == 0 and proc.poll() is None:
            assert time.monotonic() - started < deadline_s, "the sweep wrote no row"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # the sweep itself, as `kill -9 PID` would
        proc.wait()
    finally:  # then its orphaned measurement processes, so none outlives the test
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == -signal.SIGKILL


def test_kill_9_then_rerun_ends_with_exactly_the_planned_programs(tmp_path):
    out = tmp_path / "sweep"
    planned, _ = plan(SweepConfig(families=("tiny_test",), modules=(TINY,),
                                  out=str(out), limit=LIMIT))
    kill_after_first_row(out)
    assert 1 <= rows_on_disk(out) < LIMIT  # killed mid-sweep
    rerun = subprocess.run(sweep_command(out), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    rows = dataset.load(out)
    assert summary["skipped"] + summary["measured"] == LIMIT
    assert len(rows) == LIMIT and rows["key"].is_unique
    assert sorted(rows["params"]) == sorted(json.dumps(p) for _, p in planned)
    again = subprocess.run(sweep_command(out), capture_output=True, text=True, timeout=300)
    assert json.loads(again.stdout)["measured"] == 0 and len(dataset.load(out)) == LIMIT
