"""The fusion emulator's fusions against those of XLA's compiled module, program by program.

    python bench/fusion_sizes_vs_xla.py dump --dump /tmp/fusion-sizes [--outside]
    python bench/fusion_sizes_vs_xla.py compare --dump /tmp/fusion-sizes

`dump` lowers and compiles (once, for the CPU) the largest row of 3 s or less of each
family in the shipped CPU data, and with `--outside` the outside-libraries programs of
25 s or less (`bench/data/outside_libraries`), keeping each program's StableHLO and XLA's
optimized HLO; a rerun skips what is there. `compare` prints, for the corpus programs and
the outside ones, the median of log(emulated / XLA) and of its absolute value for the total
of fused ops and for the sum of squared fusion sizes (what `fusion_cost_squares` follows;
XLA's fusions counted without parameters, constants and bitcasts). It compiles nothing.
Findings: `bench/fusion_emulation.md`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
# A fused computation of XLA's text and the ops in it that cost nothing to emit.
FUSED_COMPUTATION = re.compile(r"^%?(\S*(?:fus|wrapped)\S*) .*?\{\n(.*?)\n\}", re.S | re.M)
FREE_OPS = ("parameter", "constant", "bitcast")


def sample(outside: bool) -> list[tuple[str, str]]:
    """(family, params) of the programs `dump` compiles."""
    rows = pd.read_parquet(ROOT / "training/data/cpu/rows.parquet")
    rows = rows[(rows.status == "ok") & (rows.compile_seconds <= 3)]
    chosen = rows.sort_values("compile_seconds").groupby("family").tail(1)
    programs = list(zip(chosen.family, chosen.params))
    if outside:
        import outside_programs  # noqa: F401 - registers the outside families

        measured = pd.read_parquet(ROOT / "bench/data/outside_libraries/measured.parquet")
        measured = measured[measured.compile_seconds <= 25]
        programs += list(zip(measured.family, measured.params))
    return programs


def dump(folder: Path, outside: bool) -> None:
    import jax

    from costmodel.training.measure.harness import placement

    jax.config.update("jax_enable_compilation_cache", False)
    place = placement("cpu", "")
    folder.mkdir(parents=True, exist_ok=True)
    for family, params in sample(outside):
        stem = folder / hashlib.sha1(f"{family}{params}".encode()).hexdigest()[:12]
        if stem.with_suffix(".hlo").exists():
            continue
        _, lowered = place.lower_corpus(family, json.loads(params))
        stem.with_suffix(".mlir").write_text(lowered.as_text())
        stem.with_suffix(".hlo").write_text(lowered.compile().as_text())
        stem.with_suffix(".json").write_text(json.dumps({"family": family, "params": params}))
        print(family, params, flush=True)


def xla_sizes(text: str) -> list[int]:
    """Ops of each fused computation of an optimized HLO module's text."""
    ops = re.compile(r"= \S+ ([\w-]+)\(")
    return [sum(1 for line in body.splitlines()
                if (op := ops.search(line)) and op.group(1) not in FREE_OPS)
            for _, body in FUSED_COMPUTATION.findall(text)]


def emulated_sizes(text: str) -> list[int]:
    """Ops of each fusion the emulator makes of a StableHLO module (as the features see
    them: the entry's fusions with its callees inlined, and its loop bodies')."""
    from costmodel.features.stablehlo.combine import combine
    from costmodel.features.stablehlo.parse import entry_function, functions, parse_module
    from costmodel.features.stablehlo.walk import Walker

    module = parse_module(text)  # the functions live only as long as their module
    funcs = functions(module)
    entry = entry_function(funcs)
    walker = Walker(funcs)
    tallies = {name: walker.function(name) for name in funcs}
    fusions = combine(entry, tallies, {})["fusions"] + tallies[entry].body_fusions
    return [int(size) for size, *_ in fusions]


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
