"""bench/README.md indexes every script under bench/, so a newcomer can tell which to run."""

from __future__ import annotations

import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _named(index: str) -> set[str]:
    """Script names the index mentions in backticks, alone or in a command."""
    spans = re.findall(r"`([^`]+)`", index)
    return {Path(name).name for span in spans for name in re.findall(r"[\w/.-]+\.py\b", span)}


def test_the_finder_reads_backticked_script_names():
    assert _named("| `a.py`, `archive/b.py` | `python bench/c.py --json OUT` |") == {
        "a.py", "b.py", "c.py"}


def test_every_bench_script_is_in_the_index():
    scripts = {path.relative_to(BENCH).as_posix() for path in BENCH.rglob("*.py")}
    assert len(scripts) > 40  # the folder is read
    named = _named((BENCH / "README.md").read_text())
    assert sorted(s for s in scripts if Path(s).name not in named) == []
