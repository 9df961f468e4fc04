"""The fusion emulator's fusions against those of XLA's compiled module, program by program.

    python bench/archive/fusion_sizes_vs_xla.py dump --dump /tmp/fusion-sizes [--outside]
    python bench/archive/fusion_sizes_vs_xla.py compare --dump /tmp/fusion-sizes

`dump` lowers and compiles (once, for the CPU) the largest row of 3 s or less of each
family in the shipped CPU data, and with `--outside` the programs of 25 s or less of the
three outside-libraries runs (`bench/data/outside_libraries`, `_b1`, `_b2`; a program
whose library is not installed is skipped), keeping each program's
StableHLO and XLA's optimized HLO; a rerun skips what is there. `bench/archive/fusion_oracle.py`
scores the model on XLA's own fusions of the same dump. `compare` prints, for the corpus programs and
the outside ones, the median of log(emulated / XLA) and of its absolute value for the total
of fused ops and for the sum of squared fusion sizes (what `fusion_cost_squares` follows;
XLA's fusions counted without parameters, constants and bitcasts). It compiles nothing.
Findings: `bench/archive/fusion_emulation.md`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import re
from pathlib import Path

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
# A fused computation of XLA's text and the ops in it that cost nothing to emit.
FUSED_COMPUTATION = re.compile(r"^%?(\S*(?:fus|wrapped)\S*) .*?\{\n(.*?)\n\}", re.S | re.M)
FREE_OPS = ("parameter", "constant", "bitcast")
# The outside-libraries runs `dump --outside` takes programs from: (data folder, module
# that registers its families).
OUTSIDE_RUNS = (("outside_libraries", "outside_programs"),
                ("outside_libraries_b1", "outside_programs_b1"),
                ("outside_libraries_b2", "outside_programs_b2"))


def sample(outside: bool) -> list[tuple[str, str]]:
    """(family, params) of the programs `dump` compiles."""
    rows = pd.read_parquet(ROOT / "training/data/cpu/rows.parquet")
    rows = rows[(rows.status == "ok") & (rows.compile_seconds <= 3)]
    chosen = rows.sort_values("compile_seconds").groupby("family").tail(1)
    programs = list(zip(chosen.family, chosen.params))
    for folder, module in OUTSIDE_RUNS if outside else ():
        importlib.import_module(module)  # registers the run's families
        measured = pd.read_parquet(ROOT / "bench/data" / folder / "measured.parquet")
        measured = measured[(measured.status == "ok") & (measured.compile_seconds <= 25)]
        programs += list(zip(measured.family, measured.params))
    return programs


def dump(folder: Path, outside: bool) -> None:
    import jax

    from costmodel.measure.harness import placement
    from costmodel.training import corpus

    jax.config.update("jax_enable_compilation_cache", False)
    place = placement("cpu", "")
    folder.mkdir(parents=True, exist_ok=True)
    for family, params in sample(outside):
        stem = folder / hashlib.sha1(f"{family}{params}".encode()).hexdigest()[:12]
        if stem.with_suffix(".hlo").exists():
            continue
        try:
            _, lowered = corpus.lower(place, family, json.loads(params))
        except ImportError as error:  # an outside run's library is not installed
            print(f"skipping {family}: {error}")
            continue
        stem.with_suffix(".mlir").write_text(lowered.as_text())
        stem.with_suffix(".hlo").write_text(lowered.compile().as_text())
        stem.with_suffix(".json").write_text(json.dumps({"family": family, "params": params}))
        print(family, params, flush=True)


def xla_fusions(text: str) -> list[tuple[int, float, tuple]]:
    """`(ops, cost, kernel)` of each fused computation of an optimized HLO module's text:
    its ops, their summed cost weights as the emulator weighs a fused op (`fusion_weight`:
    transcendental math 4, 64-bit and complex math doubled, an op on scalars nothing), and
    its sorted (op, type, shape) list, equal for fusions that compile to the same kernel."""
    from costmodel.features.stablehlo.fusion import op_weight

    line_parts = re.compile(r"= (\w+)\[([\d,]*)\]\S* ([\w-]+)\(")
    fusions = []
    for _, body in FUSED_COMPUTATION.findall(text):
        ops, cost, kernel = 0, 0.0, []
        for line in body.splitlines():
            found = line_parts.search(line)
            if not found or found.group(3) in FREE_OPS:
                continue
            dtype, dims, name = found.groups()
            name = name.replace("-", "_")
            weight = op_weight(name, wide=dtype in ("f64", "c128"), complex_=dtype[0] == "c")
            ops += 1
            cost += weight if dims else 0.0
            kernel.append((name, dtype, dims))
        if ops:
            fusions.append((ops, cost, tuple(sorted(kernel))))
    return fusions


def xla_sizes(text: str) -> list[int]:
    """Ops of each fused computation of an optimized HLO module's text."""
    return [ops for ops, _, _ in xla_fusions(text)]


def emulated_fusions(text: str) -> list[tuple]:
    """The emulator's fusions of a StableHLO module, `(ops, cost, indexing ops, kernel,
    inputs)` each (`Fusions.groups`), as the features see them: the entry's fusions with
    its callees inlined, and its loop bodies', each as often as it occurs."""
    from costmodel.features.stablehlo.combine import combine
    from costmodel.features.stablehlo.parse import entry_function, functions, parse_module
    from costmodel.features.stablehlo.walk import Walker

    module = parse_module(text)  # the functions live only as long as their module
    funcs = functions(module)
    entry = entry_function(funcs)
    walker = Walker(funcs, entry=entry)
    tallies = {name: walker.function(name) for name in funcs}
    counts = combine(entry, tallies, {})["fusions"] + tallies[entry].body_fusions
    return [group for group, times in counts.items() for _ in range(times)]


def emulated_sizes(text: str) -> list[int]:
    """Ops of each fusion the emulator makes of a StableHLO module."""
    return [int(size) for size, *_ in emulated_fusions(text)]


def compare(folder: Path) -> None:
    rows = []
    for meta in sorted(folder.glob("*.json")):
        family = json.loads(meta.read_text())["family"]
        xla = xla_sizes(meta.with_suffix(".hlo").read_text())
        ours = emulated_sizes(meta.with_suffix(".mlir").read_text())
        rows.append({"outside": family.startswith("outside_"),
                     "total": np.log((sum(ours) + 1) / (sum(xla) + 1)),
                     "squares": np.log((sum(s * s for s in ours) + 1)
                                       / (sum(s * s for s in xla) + 1))})
    table = pd.DataFrame(rows)
    for outside, part in table.groupby("outside"):
        cells = ", ".join(f"{kind} {np.median(part[kind]):+.2f} / "
                          f"{np.median(np.abs(part[kind])):.2f}" for kind in ("total", "squares"))
        print(f"{'outside' if outside else 'corpus'} ({len(part)}): log(emulated / XLA), "
              f"median / median abs: {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("dump", "compare"))
    parser.add_argument("--dump", type=Path, required=True, help="folder of compiled programs")
    parser.add_argument("--outside", action="store_true",
                        help="also the outside-libraries programs (needs the [outside] extra)")
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.dump, args.outside)
    else:
        compare(args.dump)


if __name__ == "__main__":
    main()
