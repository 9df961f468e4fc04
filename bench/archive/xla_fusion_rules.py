"""XLA:CPU's own fusion rules, read from its source, tried one by one on the fusion emulator:
do they bring its fusions closer to the kernels XLA compiles, and do they predict the
outside suites' compile times better?

    python bench/archive/xla_fusion_rules.py --mlir DIR [--variants V [V ...]] [--json OUT]

DIR holds the StableHLO that `llvm_oracle.py dump --run RUN --keep DIR/RUN` kept of each
outside run (`DIR/<run>/<index>.mlir`, the index of the program in the run's
`llvm_counts.json`). Each variant is a comma-separated set of the rules in `RULES`, applied
to `features/stablehlo` for the scoring only (nothing in `features/` changes); "" is the
emulator as shipped. For each variant it prints, against XLA's dumped counts, how far the
emulated fused ops, the distinct kernels (distinct fusions plus the distinct reductions,
scatters, gathers, sorts and other ops that stay kernels of their own) and the size law
of `llvm_oracle.kernel_law` over the distinct fusions fall from XLA's fused ops, XLA's
kernels and LLVM's optimized instructions (median and 90th percentile fold, each
program's log ratio less the median's), and `llvm_oracle.loo_folds`' fits of the measured
seconds on the law, on the kernels, and on each beside the shipped model. Compiles nothing.
Findings: bench/FINDINGS.md, "XLA's fusion rules on the emulator". The `same` rule scored
there (a select of one value on both sides is that value) is part of the emulator since
feature schema 19, in blocks and in inlined callees alike; the stored variants named
"same" are the rule as it was tried then, in blocks only.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import re
import textwrap
from pathlib import Path

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RUNS = tuple(f"outside_libraries_{run}" for run in ("b1", "c", "d1", "d2", "e1", "e2"))
RULES = {
    "regions": "a reduction's body, a sort's comparator and a scatter's update are compiled "
               "into their op's kernel: no fusions of their own",
    "reduce": "a reduce fuses (XLA:CPU's CanBeLoopFused) and, expensive, is not duplicated",
    "gather": "a gather fuses and, expensive, is not duplicated",
    "reuse": "an op XLA will not duplicate does not fuse into a user that reads its "
             "elements more than once (an expanding broadcast, a gather, a dynamic slice, "
             "a reduce window)",
    "dup15": "a producer its fusion would evaluate at more than 15 indices is materialized "
             "(FusionNodeIndexingEvaluation's limit)",
    "dots": "a dot one of whose operands has only batch and contracting dimensions is a "
            "fusible multiply-and-reduce (the simplifier's dot strength reduction)",
    "wired": "two fusions are one kernel only if their ops also read the same kinds of ops",
    "shared": "an op XLA will not duplicate that has several users is materialized even "
              "when they all sit in one fusion",
    "structure": "two fusions are one kernel only if their ops read one another the same "
                 "way: each op keyed by its signature and its operands' keys, in order",
}
# ops that stay kernels of their own when they do not fuse
KERNEL_OPS = frozenset({"reduce", "scatter", "gather", "sort", "reduce_window",
                        "select_and_scatter", "dynamic_update_slice"})
REUSING = frozenset({"broadcast_in_dim", "gather", "dynamic_slice", "reduce_window"})
INDEXING_LIMIT = 15
SHAPE = re.compile(r"tensor<((?:\d+x)*)[a-z]")


def _rewritten(function, edits: list[tuple[str, str]], names: dict):
    """`function` compiled again from its source with each `(old, new)` edit made."""
    source = textwrap.dedent(inspect.getsource(function))
    for old, new in edits:
        if old not in source:
            raise RuntimeError(f"{function.__qualname__} no longer holds {old.strip()!r}")
        source = source.replace(old, new, 1)
    namespace = dict(vars(inspect.getmodule(function)), **names)
    exec(source, namespace)  # noqa: S102  (our own source, edited)
    return namespace[function.__name__]


def vector_like(op) -> bool:
    """Whether one of a dot's operands has only batch and contracting dimensions."""
    from costmodel.features.stablehlo.contractions import _dot_dims

    ranks = [value.type.rank for value in list(op.operands)[:2]]
    if "dot_dimension_numbers" not in op.attributes:  # stablehlo.dot
        return min(ranks) <= 1
    dims = _dot_dims(op)
    return any(len(dims.get(f"{side}_batching_dimensions", []))
               + len(dims.get(f"{side}_contracting_dimensions", [])) == rank
               for side, rank in zip(("lhs", "rhs"), ranks))


@contextlib.contextmanager
def rules(chosen: set[str], found: set):
    """The emulator with the `chosen` rules for the block; the distinct non-fused kernel
    ops it walks are added to `found`. Each group `Fusions.groups` returns ends with its
    root's result type."""
    from costmodel.features import categories
    from costmodel.features.stablehlo import fusion, kinds, walk

    unknown = chosen - set(RULES)
    if unknown:
        raise ValueError(f"unknown rules {sorted(unknown)}; known: {sorted(RULES)}")
    saved = [(fusion, "FUSIBLE_HLO"), (kinds, "FUSIBLE_HLO"), (fusion, "UNDUPLICATED_HLO"),
             (fusion.Fusions, "groups"), (fusion.Fusions, "visit"), (walk.Walker, "_block")]
    before = [getattr(owner, name) for owner, name in saved]
    try:  # restored even when an edit no longer applies
        fusion._FLAGS.clear()
        fused = {name for name in ("reduce", "gather") if name in chosen}
        fusion.FUSIBLE_HLO = kinds.FUSIBLE_HLO = categories.FUSIBLE_HLO | fused
        fusion.UNDUPLICATED_HLO = categories.UNDUPLICATED_HLO | fused | (
            {"dot_general"} if "dots" in chosen else set())

        group_edits = [
            ("groups.append([0, 0.0, 0, [], set()])", "groups.append([0, 0.0, 0, [], set(), []])"),
            ("            group[3].append(signature)\n",
             "            group[3].append(signature if not WIRED else (signature, tuple(sorted("
             "signatures.get(p, '') if isinstance(p, int) else '' for p in fusible[position][5]))))\n"
             "            group[5].append(position)\n"),
            ("    return [(*group[:3], hash(tuple(sorted(group[3]))), len(group[4]))",
             "    return [(*group[:3], hash(tuple(sorted(map(str, group[3])))) if not STRUCTURE "
             "else STRUCTURAL(self, group[5], fusion, fusion_of), len(group[4]), "
             "signatures.get(group[5][0], ''))"),
            ("            for group in groups if group[0]]",
             "            for fusion, group in enumerate(groups) if group[0]]"),
        ]
        if "reuse" in chosen:
            group_edits.append((
                "        if single_use and (len(users) > 1",
                "        if not cheap and users and not users.isdisjoint(self._reusing):\n"
                "            targets = {new_fusion()}\n"
                "        elif single_use and (len(users) > 1"))
        if "shared" in chosen:
            group_edits.append((
                "        if single_use and (len(users) > 1",
                "        if not cheap and len(users) > 1:\n"
                "            targets = {new_fusion()}\n"
                "        elif single_use and (len(users) > 1"))
        if "dup15" in chosen:
            group_edits += [
                ("    fusion_of: dict = {}\n", "    fusion_of: dict = {}\n    evaluated: dict = {}\n"),
                ("        fusion_of[position] = targets\n",
                 "        targets = LIMITED(self, position, users, targets, fusion_of, evaluated, "
                 "new_fusion)\n        fusion_of[position] = targets\n")]
        fusion.Fusions.groups = _rewritten(before[3], group_edits,
                                           {"WIRED": "wired" in chosen, "LIMITED": _limited,
                                            "STRUCTURE": "structure" in chosen,
                                            "STRUCTURAL": _structural})
        original_visit = before[4]

        def visit(self, operands, results, name, weight, rank, signature=None, reads=None,
                  merge=False):
            position = len(self._rank)
            producers = [self._producer.get(operand) for operand in operands]
            original_visit(self, operands, results, name, weight, rank, signature, reads, merge)
            if len(self._rank) > position:
                self.__dict__.setdefault("_operands", {})[position] = producers
            # (a broadcast that only inserts unit dimensions weighs 0: a bitcast, no reuse)
            if name in REUSING and weight != 0.0 and len(self._rank) > position:
                self.__dict__.setdefault("_reusing", set()).add(position)

        fusion.Fusions.visit = visit
        fusion.Fusions._reusing = frozenset()  # until a first reusing op is visited
        block_edits = [(
            "                fusions.visit(operands, results, name, None, res.rank)\n",
            "                fusions.visit(operands, results, name, None, res.rank)\n"
            "                if name in KERNEL_OPS:\n"
            "                    FOUND.add((name, res.texts))\n")]
        if "regions" in chosen:
            block_edits.append(("self._block(inner_block, tally, trips, depth, branches))",
                                "self._block(inner_block, tally, trips, depth, branches, "
                                "fuse=branches is not None))"))
        if "dots" in chosen:
            branch = '        elif dot is not None and dot[1] or name == "slice":\n'
            block_edits.append((branch, (
                "        elif dot is not None and VECTOR_LIKE(op):\n"
                "            fusions.visit(operands, results, 'dot_general', 2.0, res.rank,\n"
                "                          ('dot_general', self._attributes(op, op.attributes),\n"
                "                           res.texts), None, False)\n") + branch))
        walk.Walker._block = _rewritten(before[5], block_edits, {
            "KERNEL_OPS": KERNEL_OPS, "FOUND": found, "VECTOR_LIKE": vector_like})
        yield
    finally:
        for (owner, name), value in zip(saved, before):
            setattr(owner, name, value)
        if "_reusing" in vars(fusion.Fusions):
            del fusion.Fusions._reusing
        fusion._FLAGS.clear()


def _limited(fusions, position: int, users: set, targets: set, fusion_of: dict,
             evaluated: dict, new_fusion) -> set:
    """`targets`, or a fusion of its own when some fusion of `targets` would evaluate
    `position` at more than `INDEXING_LIMIT` indices: the distinct users inside it that
    change indexing, found through users that read at their own index, each counted as
    often as it is evaluated itself (XLA's `FusionNodeIndexingEvaluation`)."""
    found = {}
    for target in targets:
        readers: set = set()
        for user in users:
            if target in fusion_of.get(user, ()):
                if user in fusions._same_index:
                    readers |= evaluated.get((user, target), ({None}, 1))[0]  # None: the output
                else:
                    readers.add(user)
        if readers:
            count = sum(evaluated.get((reader, target), (None, 1))[1] for reader in readers)
            if count > INDEXING_LIMIT:
                return {new_fusion()}
            found[target] = (readers, count)
    for target, value in found.items():
        evaluated[position, target] = value
    return targets


def _structural(fusions, positions: list, fusion: int, fusion_of: dict) -> int:
    """A fusion's kernel key from its ops read as a graph: each op's key is its signature
    and its operands' keys in order, an operand from outside the fusion keyed by what
    produced it (its signature, or its rank when it does not fuse)."""
    signatures, operands = fusions._signature, getattr(fusions, "_operands", {})
    keys: dict = {}
    for position in sorted(positions):
        parts = []
        for producer in operands.get(position, ()):
            if producer is None:
                parts.append("argument")
            elif fusion in fusion_of.get(producer, ()):
                parts.append(keys.get(producer, ""))
            else:
                parts.append(("input", signatures.get(producer, fusions._rank[producer])))
        keys[position] = hash((signatures.get(position, ""), tuple(parts)))
    return hash(tuple(sorted(keys.values())))


def elements(type_text: str) -> int:
    """Elements of the first tensor type in a signature's text (1 for a scalar)."""
    found = SHAPE.search(type_text)
    if not found:
        return 1
    return int(np.prod([int(d) for d in found.group(1).split("x") if d] or [1]))


def program(text: str, chosen: set[str]) -> tuple[list[tuple], int]:
    """The emulator's fusions of a StableHLO module under `chosen` rules, `(ops, root's
    output elements, kernel)` each, and its distinct ops that stay kernels unfused."""
    from fusion_sizes_vs_xla import emulated_fusions

    found: set = set()
    with rules(chosen, found):
        groups = emulated_fusions(text)
    return [(int(g[0]), elements(g[5]), g[3]) for g in groups], len(found)


def score(mlir: Path, variants: list[str], runs=RUNS) -> dict:
    import llvm_oracle

    from costmodel.models import load_default
    from costmodel.training.evaluation.outside import stored_inputs

    artifact = load_default("cpu")
    law = llvm_oracle.kernel_law(list(runs))
    base = {"run": [], "measured": [], "model": [], "xla_fused_ops": [], "kernels": [],
            "llvm_optimized": [], "text": []}
    for run in runs:
        data = json.loads((ROOT / "bench/results" / f"{run}.json").read_text())
        counts = json.loads((ROOT / "bench/data" / run / "llvm_counts.json").read_text())
        index = {row["program"]: i for i, row in enumerate(counts)}
        point = artifact.predict(stored_inputs(data))["compile_seconds"]["point"]
        for row, predicted in zip(data["results"], point):
            i = index.get(row["program"])
            if i is None or not (mlir / run / f"{i}.mlir").exists():
                continue
            base["run"].append(run)
            base["measured"].append(row["measured_s"])
            base["model"].append(predicted)
            for name in ("xla_fused_ops", "kernels", "llvm_optimized"):
                base[name].append(counts[i][name])
            base["text"].append((mlir / run / f"{i}.mlir").read_text())  # read once, walked per variant
    groups = np.array(base["run"])
    y = np.log(base["measured"])
    model = np.log(base["model"])
    xla_kernels = np.log(base["kernels"])

    def fit(columns):
        folds = np.exp(llvm_oracle.loo_folds(y, columns, groups))
        return {"median_fold": float(np.median(folds)), "p90_fold": float(np.quantile(folds, 0.9)),
                "by_run": {run: float(np.median(folds[groups == run])) for run in runs}}

    def spread(log_ratio):
        off = np.abs(log_ratio - np.median(log_ratio))
        return [float(np.exp(np.median(off))), float(np.exp(np.quantile(off, 0.9)))]

    out = {"programs": int(len(y)), "model": artifact.version, "rules": RULES,
           "fits": {"model": fit([model]), "xla kernels": fit([xla_kernels]),
                    "model + xla kernels": fit([model, xla_kernels])}, "variants": {}}
    for variant in variants:
        chosen = set(filter(None, variant.split(",")))
        law_total, fused, kernels = [], [], []
        for text in base["text"]:
            fusions, unfused = program(text, chosen)
            distinct = list({kernel: (ops, size) for ops, size, kernel in fusions}.values())
            law_total.append(llvm_oracle.law_instructions(
                [[ops, size, 0] for ops, size in distinct], law))
            fused.append(max(1, sum(ops for ops, _, _ in fusions)))
            kernels.append(len(distinct) + unfused)
        law_total, fused, kernels = (np.log(np.maximum(v, 1)) for v in (law_total, fused, kernels))
        result = {
            "fused_ops_vs_xla": spread(fused - np.log(base["xla_fused_ops"])),
            "kernels_vs_xla": spread(kernels - xla_kernels),
            "law_vs_llvm": spread(law_total - np.log(base["llvm_optimized"])),
            "fits": {"law": fit([law_total]), "model + law": fit([model, law_total]),
                     "model + fused ops": fit([model, fused]), "kernels": fit([kernels]),
                     "model + kernels": fit([model, kernels])}}
        out["variants"][variant or "as shipped"] = result
        print(f"{variant or 'as shipped':32s} fused ops {result['fused_ops_vs_xla'][0]:.3f}  "
              f"kernels {result['kernels_vs_xla'][0]:.3f}  law/LLVM {result['law_vs_llvm'][0]:.3f}  "
              + "  ".join(f"{k} {v['median_fold']:.3f}/{v['p90_fold']:.2f}"
                          for k, v in result["fits"].items()), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlir", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", default=[
        "", "regions", "regions,reduce,gather", "regions,reduce,gather,reuse",
        "regions,dup15", "regions,reduce,gather,dup15", "regions,dots", "wired", "shared",
        "regions,shared", "structure", "regions,reduce,gather,reuse,structure"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out = score(args.mlir, args.variants)
    for label, values in out["fits"].items():
        print(f"{label:32s} median {values['median_fold']:.3f}  p90 {values['p90_fold']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
