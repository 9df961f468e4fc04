"""How one fusion's compile time grows with its length, against the shipped CPU model.

One elementwise chain per op kind and element type (`complex_op_cost.chain`: a (64,)
vector, each step reading a row of one input, XLA:CPU makes it one fusion), at doubling
lengths, timed interleaved in one process with the reference program; beside each, the
shipped CPU model's prediction (uncalibrated: only the growth from one length to the next
is compared, and the machine's speed cancels there). `--ir` also counts the LLVM
instructions XLA:CPU emits for each chain (before and after LLVM's optimizations), each in
a process of its own with XLA's dump on.

    python bench/archive/fusion_growth.py [--rounds 3] [--ir] [--json bench/results/fusion_growth.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import numpy as np
from _compile_timing import medians, with_reference
from complex_op_cost import chain

DTYPES = {"float32": np.float32, "complex64": np.complex64}
# (kind, element type): lengths; a complex divide of 256 steps took 12 s in scratch
LENGTHS = {
    ("add", "float32"): (512, 1024, 2048),
    ("divide", "float32"): (512, 1024, 2048),
    ("exp", "float32"): (256, 512, 1024, 2048),
    ("add", "complex64"): (256, 512, 1024),
    ("multiply", "complex64"): (128, 256, 512),
    ("divide", "complex64"): (32, 64, 128, 256),
    ("exp", "complex64"): (64, 128, 256),
}
# an LLVM instruction: a line of a function body that assigns a value or stores
_INSTRUCTION_STARTS = ("store ", "br ", "ret ", "call ")


def label(kind: str, dtype: str, steps: int) -> str:
    return f"{dtype} {kind} x{steps}"


def predicted(kind: str, dtype: str, steps: int) -> float:
    import costmodel

    fn, args = chain(kind, steps, DTYPES[dtype])
    return costmodel.predict(fn, *args).compile_seconds


def llvm_instructions(folder: str, stage: str) -> int:
    """Instructions in the dumped LLVM modules of the chain's jit (`stage`: "no-opt" or
    "with-opt")."""
    count = 0
    for path in glob.glob(os.path.join(folder, f"*jit_fn*ir-{stage}.ll")):
        with open(path) as module:
            for line in module:
                text = line.strip()
                if text.startswith("%") and " = " in text or text.startswith(_INSTRUCTION_STARTS):
                    count += 1
    return count


_IR_CHILD = """
import sys
sys.path.insert(0, sys.argv[4])
from fusion_growth import DTYPES, chain
import jax
fn, args = chain(sys.argv[1], int(sys.argv[3]), DTYPES[sys.argv[2]])
jax.jit(fn).lower(*args).compile()
"""


def ir_counts(kind: str, dtype: str, steps: int) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={folder}", "JAX_PLATFORMS": "cpu"}
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, "-c", _IR_CHILD, kind, dtype, str(steps), here],
                       env=env, check=True, capture_output=True)
        return {stage: llvm_instructions(folder, stage) for stage in ("no-opt", "with-opt")}


def growth(values: dict[int, float]) -> dict[str, float]:
    """Exponent of each doubling: log2 of the next length's value over this one's."""
    lengths = sorted(values)
    return {f"{a}->{b}": math.log(values[b] / values[a]) / math.log(b / a)
            for a, b in zip(lengths, lengths[1:])}


def run(rounds: int, ir: bool) -> dict:
    builds = {label(kind, dtype, n): (lambda kind=kind, dtype=dtype, n=n:
                                      chain(kind, n, DTYPES[dtype]))
              for (kind, dtype), lengths in LENGTHS.items() for n in lengths}
    times = with_reference(builds, rounds)
    seconds = medians(times)
    chains = {}
    for (kind, dtype), lengths in LENGTHS.items():
        measured = {n: seconds[label(kind, dtype, n)] for n in lengths}
        model = {n: predicted(kind, dtype, n) for n in lengths}
        entry = {"measured_s": measured, "predicted_s": model,
                 "measured_growth": growth(measured), "predicted_growth": growth(model)}
        if ir:
            entry["llvm_instructions"] = {n: ir_counts(kind, dtype, n) for n in lengths}
        chains[f"{dtype} {kind}"] = entry
        for n in lengths:
            extra = ""
            if ir:
                counts = entry["llvm_instructions"][n]
                extra = f"  LLVM {counts['no-opt']:6d} -> {counts['with-opt']:6d}"
            print(f"{dtype:9} {kind:8} x{n:<5} measured {measured[n]:7.3f} s  predicted "
                  f"{model[n]:6.3f} s{extra}", flush=True)
    return {"rounds": rounds, "reference_s": seconds["(reference)"], "times_s": times,
            "chains": chains}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ir", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = run(args.rounds, args.ir)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
