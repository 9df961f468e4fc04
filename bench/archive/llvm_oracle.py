"""Would counts only a compile can give (LLVM kernels and instructions, XLA's fused ops)
explain the outside suites' compile times better than the CPU model? An oracle: what the
fusion emulator could give at best if it matched XLA:CPU one level further down.

    python bench/archive/llvm_oracle.py dump --run RUN --programs MODULE [--keep DIR]
    python bench/archive/llvm_oracle.py score --runs RUN [RUN ...] [--json OUT]

RUN is a stored outside run (`bench/data/<RUN>`, e.g. outside_libraries_b1) and MODULE the
module that registers its programs (e.g. outside_programs_b1). `dump` compiles each ok
program of the run once, in a fresh process with
`--xla_dump_to` (not timed; the run's own timings are the truth), and counts in the
entry module's dump: XLA:CPU's compiled kernels (one LLVM module per distinct kernel),
their LLVM instructions before and after LLVM's optimization, the optimized HLO's
instructions, fusions and fused ops (parameters, constants and bitcasts not counted), and,
from the same lowering's StableHLO, the emulator's fusions and fused ops. It writes
`bench/data/<run>/llvm_counts.json`; needs the run's outside extra installed.

`score` fits log measured seconds on one log count at a time (and beside the model's log
prediction), one intercept per run and a common slope, each program left out in turn,
and prints the median and 90th percentile fold; the model's own prediction is fitted the
same way, so calibration does not enter. It first fits the dumps' kernels' optimized LLVM
instructions as a cost per kernel plus a cost per fused op by the kernel's output
elements (`kernel_law`), and scores that law's total over XLA's kernels as one more count;
with `dump --run llvm_corpus --programs costmodel.training.corpus` done, the same counts on
corpus programs (`corpus_fit`). Compiles nothing.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import numpy as np
from fusion_sizes_vs_xla import FREE_OPS

ROOT = Path(__file__).resolve().parents[2]
OP = re.compile(r"= \S+ ([a-z\-]+)\(")  # an instruction's opcode in HLO text
# a fusion instruction: its name, its result's dimensions, the computation it calls
FUSION = re.compile(r"%(\S+) = \w+\[([\d,]*)\]\S* fusion\(.*?calls=%([^,\s]+)")
# output elements of a kernel at which its optimized LLVM instructions per op change
ELEMENT_BINS = (0, 1, 4, 64, 512, 1024, np.inf)
# `dump --run llvm_corpus --programs costmodel.training.corpus`: the corpus's largest
# program of each family compiled in this many seconds or less
CORPUS, CORPUS_MOST_SECONDS = "llvm_corpus", 10.0
COUNTS = ("kernels", "llvm_optimized", "llvm_emitted", "hlo_instructions", "xla_fused_ops",
          "emulated_fused_ops", "hlo_ops_inlined")

# Run in a fresh process per program: lower, keep the StableHLO, compile with the dump on.
_ONE = r"""
import json, sys
sys.path[:0] = {paths}
import jax, importlib
importlib.import_module({module!r})
from costmodel.training.corpus.registry import get_family
jax.config.update("jax_enable_compilation_cache", False)
family = get_family({family!r})
jax.config.update("jax_enable_x64", bool(family.x64))
fn, args = family.build(**json.loads({params!r}))
lowered = jax.jit(fn).lower(*args)
open({mlir!r}, "w").write(lowered.as_text())
lowered.compile()
"""


def llvm_instructions(paths: list[str]) -> int:
    """Instructions of LLVM IR files (their indented lines that are not comments)."""
    total = 0
    for path in paths:
        with open(path) as handle:
            total += sum(1 for line in handle
                         if line.startswith("  ") and not line.lstrip().startswith(";"))
    return total


def xla_fused_ops(hlo_text: str) -> tuple[int, int]:
    """(fusions, fused ops) of an optimized HLO module's text."""
    from fusion_sizes_vs_xla import xla_fusions

    sizes = [ops for ops, _, _ in xla_fusions(hlo_text)]
    return len(sizes), int(sum(sizes))


def kernel_rows(stem: str, hlo: str) -> list[list[int]]:
    """`[fused ops, output elements, optimized LLVM instructions]` of each kernel of a
    dumped module whose fusion instruction the optimized HLO names."""
    from distinct_kernels import computations

    fused = {name.lstrip("%"): sum(op not in FREE_OPS for line in body for op in OP.findall(line))
             for name, body in computations(hlo).items()}
    fusions = {name: (dims, computation) for name, dims, computation in FUSION.findall(hlo)}
    rows = []
    for path in glob.glob(f"{stem}.*_kernel_module.ir-with-opt.ll"):
        name = path[len(stem) + 1:-len("_kernel_module.ir-with-opt.ll")]
        if name in fusions:
            dims, computation = fusions[name]
            elements = int(np.prod([int(d) for d in dims.split(",") if d]))
            rows.append([fused.get(computation, 0), elements, llvm_instructions([path])])
    return rows


def counts_of(folder: str, mlir: str) -> dict:
    """The counts of one program's dump folder and its StableHLO."""
    from fusion_sizes_vs_xla import emulated_fusions

    modules = glob.glob(f"{folder}/*.cpu_after_optimizations.txt")
    entry = max(modules, key=os.path.getsize)  # the program's own module
    stem = entry[:-len(".cpu_after_optimizations.txt")]
    hlo = Path(entry).read_text()
    fusions, fused = xla_fused_ops(hlo)
    emulated = [int(size) for size, *_ in emulated_fusions(Path(mlir).read_text())]
    return {"kernel_rows": kernel_rows(stem, hlo),
            "kernels": len(glob.glob(f"{stem}.*_kernel_module.ir-with-opt.ll")),
            "llvm_optimized": llvm_instructions(glob.glob(f"{stem}.*ir-with-opt.ll")),
            "llvm_emitted": llvm_instructions(glob.glob(f"{stem}.*ir-no-opt.ll")),
            "hlo_instructions": sum(1 for line in hlo.splitlines() if " = " in line),
            "xla_fusions": fusions, "xla_fused_ops": fused,
            "emulated_fusions": len(emulated), "emulated_fused_ops": int(sum(emulated))}


def corpus_sample(most_seconds: float = CORPUS_MOST_SECONDS) -> list[tuple[str, str]]:
    """(family, params) of the CPU corpus's largest row of each family that compiled in
    `most_seconds` or less."""
    from costmodel.training.store import dataset

    rows = dataset.load(ROOT / "training/data/cpu/rows.parquet")
    rows = rows[(rows["status"] == "ok") & (rows["compile_seconds"] <= most_seconds)]
    chosen = rows.sort_values("compile_seconds").groupby("family").tail(1)
    return list(zip(chosen["family"], chosen["params"]))


def dump(run: str, programs: str, keep: Path | None = None) -> None:
    """Counts of every ok program of the stored run `run` (or of `corpus_sample()` when
    `run` is `CORPUS`), written to `bench/data/<run>/llvm_counts.json`."""
    from costmodel.training.store import dataset

    if run == CORPUS:
        pairs = corpus_sample()
    else:
        measured = dataset.load(ROOT / "bench/data" / run)
        measured = measured[measured["status"] == "ok"]
        pairs = list(zip(measured["family"], measured["params"]))
    paths = [str(ROOT), str(ROOT / "bench"), str(ROOT / "bench/evaluations")]
    found = []
    for family, params in pairs:
        with tempfile.TemporaryDirectory(prefix="llvm-oracle-") as folder:
            mlir = f"{folder}/program.mlir"
            script = _ONE.format(paths=paths, module=programs, family=family, params=params,
                                 mlir=mlir)
            env = dict(os.environ, JAX_PLATFORMS="cpu",
                       XLA_FLAGS=f"--xla_dump_to={folder}/dump")
            done = subprocess.run([sys.executable, "-c", script], env=env,
                                  capture_output=True, text=True)
            if done.returncode:
                print(f"{family} {params}: failed: {done.stderr.strip()[-300:]}", flush=True)
                continue
            found.append({"program": f"{family} {params}", **counts_of(f"{folder}/dump", mlir)})
            print({k: v for k, v in found[-1].items() if k != "kernel_rows"}, flush=True)
            if keep:
                keep.mkdir(parents=True, exist_ok=True)
                Path(mlir).rename(keep / f"{len(found) - 1}.mlir")
    out = ROOT / "bench/data" / run / "llvm_counts.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("[\n" + ",\n".join(json.dumps(program) for program in found) + "\n]\n")
    print(f"wrote {out}")


def loo_folds(y: np.ndarray, columns: list[np.ndarray], runs: np.ndarray) -> np.ndarray:
    """|log error| of each program predicted by least squares on the others: one
    intercept per run, a common slope per column."""
    design = np.column_stack([(runs == r).astype(float) for r in np.unique(runs)] + columns)
    errors = []
    for i in range(len(y)):
        others = np.arange(len(y)) != i
        coef = np.linalg.lstsq(design[others], y[others], rcond=None)[0]
        errors.append(abs(design[i] @ coef - y[i]))
    return np.array(errors)


def score(runs: list[str]) -> dict:
    """Each count's leave-one-out fit of the runs' measured seconds (see the module's
    docstring), the size law, and the emulator's fused ops over XLA's per run."""
    from costmodel.models import load_default
    from costmodel.training.evaluation.outside import stored_inputs

    artifact = load_default("cpu")
    law = kernel_law(runs)
    frame = {name: [] for name in ("run", "measured", "model", *COUNTS, "kernel_law")}
    for run in runs:
        data = json.loads((ROOT / "bench/results" / f"{run}.json").read_text())
        counts = {row["program"]: row for row in json.loads(
            (ROOT / "bench/data" / run / "llvm_counts.json").read_text())}
        kept = [i for i, row in enumerate(data["results"]) if row["program"] in counts]
        inputs = stored_inputs(data)
        point = artifact.predict([inputs[i] for i in kept])["compile_seconds"]["point"]
        for i, predicted in zip(kept, point):
            row = data["results"][i]
            frame["run"].append(run)
            frame["measured"].append(row["measured_s"])
            frame["model"].append(predicted)
            for name in COUNTS:
                frame[name].append(inputs[i][name] if name == "hlo_ops_inlined"
                                   else counts[row["program"]][name])
            frame["kernel_law"].append(law_instructions(counts[row["program"]]["kernel_rows"], law))
    frame = {name: np.array(values) for name, values in frame.items()}
    y, groups = np.log(frame["measured"]), frame["run"]
    out = {"programs": int(len(y)), "runs": runs, "model": artifact.version, "fits": {},
           "kernel_law": law}
    for label, columns in [("model", ["model"])] + [(c, [c]) for c in (*COUNTS, "kernel_law")] + [
            (f"model + {c}", ["model", c]) for c in ("kernels", "llvm_optimized")]:
        folds = np.exp(loo_folds(y, [np.log(frame[c]) for c in columns], groups))
        by_run = {run: float(np.median(folds[groups == run])) for run in runs}
        out["fits"][label] = {"median_fold": float(np.median(folds)),
                              "p90_fold": float(np.quantile(folds, 0.9)), "by_run": by_run}
        print(f"{label:28s} median {np.median(folds):.3f}  p90 {np.quantile(folds, 0.9):.3f}  "
              + "  ".join(f"{r}: {v:.3f}" for r, v in by_run.items()))
    ratio = frame["emulated_fused_ops"] / frame["xla_fused_ops"]
    out["emulated_over_xla_fused_ops"] = {
        run: [float(np.min(ratio[groups == run])), float(np.median(ratio[groups == run])),
              float(np.max(ratio[groups == run]))] for run in runs}
    print("emulated / XLA fused ops (min, median, max):", out["emulated_over_xla_fused_ops"])
    return out


def law_design(ops: np.ndarray, elements: np.ndarray) -> np.ndarray:
    """Per kernel: 1, then its fused ops in the column of its output elements' bin."""
    bins = np.digitize(elements, ELEMENT_BINS[1:-1], right=True)
    return np.column_stack([np.ones(len(ops))] + [ops * (bins == b)
                                                  for b in range(len(ELEMENT_BINS) - 1)])


def law_instructions(kernel_rows: list, law: dict) -> float:
    """A program's LLVM instructions as `law` (`kernel_law`'s fit) puts them, from its
    kernels' fused ops and output elements."""
    ops, elements, _ = np.array(kernel_rows, float).reshape(-1, 3).T
    coef = np.r_[law["per_kernel"], list(law["per_op_by_elements"].values())]
    return float((law_design(ops, elements) @ coef).sum())


def kernel_law(runs: list[str]) -> dict:
    """A program's optimized LLVM instructions as a cost per kernel plus a cost per fused op
    by its kernel's output elements (`ELEMENT_BINS`), fitted by least squares over every
    kernel of the runs' dumps; and how well its sum, and a flat cost per fused op, give
    each program's total (median and largest fold)."""
    kernels, programs = [], []
    for run in runs:
        for index, program in enumerate(json.loads(
                (ROOT / "bench/data" / run / "llvm_counts.json").read_text())):
            kernels += program["kernel_rows"]
            programs += [(run, index)] * len(program["kernel_rows"])
    ops, elements, instructions = np.array(kernels, float).T
    design = law_design(ops, elements)
    coef = np.linalg.lstsq(design, instructions, rcond=None)[0]
    owner = np.unique(np.array([f"{r}/{i}" for r, i in programs]), return_inverse=True)[1]
    total = np.bincount(owner, instructions)
    law = np.bincount(owner, design @ coef)
    flat = np.bincount(owner, ops) * instructions.sum() / ops.sum()
    folds = {name: np.exp(np.abs(np.log(total / np.maximum(guess, 1.0))))
             for name, guess in (("law", law), ("flat", flat))}
    out = {"kernels": int(len(ops)), "programs": int(owner.max() + 1),
           "per_kernel": float(coef[0]),
           "per_op_by_elements": {f"{lo:g}-{hi:g}": float(c) for lo, hi, c in
                                  zip(ELEMENT_BINS[:-1], ELEMENT_BINS[1:], coef[1:])},
           **{f"{name}_median_fold": float(np.median(f)) for name, f in folds.items()},
           **{f"{name}_max_fold": float(f.max()) for name, f in folds.items()}}
    return out


def corpus_fit(law: dict) -> dict:
    """On the corpus programs `dump --run llvm_corpus` counted: each count's leave-one-out
    fit of their compile seconds (drift-normalized as training normalizes them; one
    intercept), with `law` (fitted on the outside runs' kernels) over their XLA kernels.
    No model enters: it was trained on these rows."""
    from costmodel.training.fitting.fit import normalized_seconds
    from costmodel.training.store import dataset

    counts = json.loads((ROOT / "bench/data" / CORPUS / "llvm_counts.json").read_text())
    rows = dataset.load(ROOT / "training/data/cpu/rows.parquet")
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    seconds = dict(zip(rows["family"] + " " + rows["params"], normalized_seconds(rows)[0]))
    ops = dict(zip(rows["family"] + " " + rows["params"], rows["f_hlo_ops_inlined"]))
    y = np.log([seconds[c["program"]] for c in counts])
    columns = {name: [c[name] for c in counts] for name in COUNTS if name != "hlo_ops_inlined"}
    columns["hlo_ops_inlined"] = [ops[c["program"]] for c in counts]
    columns["kernel_law"] = [law_instructions(c["kernel_rows"], law) for c in counts]
    one = np.array(["corpus"] * len(y))
    out = {"programs": len(y), "fits": {}}
    for name, values in columns.items():
        folds = np.exp(loo_folds(y, [np.log(np.maximum(values, 1.0))], one))
        out["fits"][name] = {"median_fold": float(np.median(folds)),
                             "p90_fold": float(np.quantile(folds, 0.9))}
        print(f"corpus {name:24s} median {np.median(folds):.3f}  p90 {np.quantile(folds, 0.9):.3f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("dump", "score"))
    parser.add_argument("--run", help="dump: the stored outside run (bench/data/<run>)")
    parser.add_argument("--programs", help="dump: the module that registers its programs")
    parser.add_argument("--keep", type=Path, help="dump: keep each program's StableHLO here")
    parser.add_argument("--runs", nargs="+", help="score: the runs whose counts to join")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.mode == "dump":
        importlib.import_module(args.programs)  # fails early when its extra is missing
        dump(args.run, args.programs, args.keep)
        return
    out = score(args.runs)
    print(json.dumps(out["kernel_law"], indent=1))
    if (ROOT / "bench/data" / CORPUS / "llvm_counts.json").exists():
        out["corpus"] = corpus_fit(out["kernel_law"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
