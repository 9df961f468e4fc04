"""Imported first by the scripts of this folder that use other benches' modules: puts
bench/ (the shared helpers) and bench/evaluations/ (the outside programs) on sys.path, so
they import by name as they do when run from their own folder."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
for room in (BENCH, BENCH / "evaluations", Path(__file__).resolve().parent):
    if str(room) not in sys.path:
        sys.path.append(str(room))
