"""Where does XLA spend one compile? Samples a corpus program's compile with Linux `perf`.

Lowers the program first, then records only while `compile()` runs (perf attaches to this
process for that span), and prints the native functions with the most samples. This is how
two of the CPU model's added terms were found: a 4000-kernel unrolled loop spent 80% of
its compile building and pruning the runtime's kernel dependency graph, a 64-branch switch
gradient 89% in HLO ordering's call-graph dominance checks.

    python bench/archive/perf_compile.py loop \
        '{"body": 2, "steps": 1000, "style": "unrolled", "unroll": 1, "width": 16}'
    python bench/archive/perf_compile.py cond_switch \\
        '{"branches": 64, "grad": true, "size": 4, "width": 256}' --top 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from costmodel.measure.harness import placement
from costmodel.training import corpus


def top_symbols(data_path: str, top: int) -> list[tuple[float, str]]:
    """`(percent of samples, symbol)` of the `top` native functions in a perf data file."""
    report = subprocess.run(
        ["perf", "report", "-i", data_path, "--no-children", "--sort", "symbol", "--stdio"],
        capture_output=True, text=True, check=True).stdout
    rows = []
    for line in report.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0].endswith("%") and parts[1] == "[.]":
            rows.append((float(parts[0].rstrip("%")), parts[2].strip()))
    return rows[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family")
    parser.add_argument("params", help="the program's parameters as JSON")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--frequency", type=int, default=499, help="samples per second")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Linux only: the linux-tools / perf package)")

    _, lowered = corpus.lower(placement("cpu", ""), args.family, json.loads(args.params))
    with tempfile.TemporaryDirectory() as tmp:
        data_path = os.path.join(tmp, "perf.data")
        recorder = subprocess.Popen(
            ["perf", "record", "-F", str(args.frequency), "-g", "-p", str(os.getpid()),
             "-o", data_path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # perf needs a moment to attach
        start = time.perf_counter()
        lowered.compile()
        seconds = time.perf_counter() - start
        recorder.send_signal(signal.SIGINT)
        recorder.wait()
        print(f"{args.family} {args.params}: compiled in {seconds:.2f} s")
        for percent, symbol in top_symbols(data_path, args.top):
            print(f"{percent:6.2f}%  {symbol[:110]}")


if __name__ == "__main__":
    main()
