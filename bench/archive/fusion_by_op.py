"""Where the fusion emulator's excess lies, op kind by op kind, for one program: the ops
inside XLA:CPU's fusions (its optimized module, one compile, no timing) against those the
emulator puts into its fusion groups, and both fusion-size histograms.

    python bench/archive/fusion_by_op.py MODULE.py FAMILY 'PARAMS_JSON'
    python bench/archive/fusion_by_op.py bench/evaluations/outside_programs_b1.py \\
        outside_b_xminigrid_vmapped_step \\
        '{"batch": 8, "env_id": "MiniGrid-Empty-5x5"}'

An op the emulator copies into several fusions counts once per copy, as XLA's does. The
emulated side holds the groups of every block the walker visits: a called function's body
is walked on its own as well as inlined into its caller, so with calls it counts more than
the features' `fusion_groups` (xminigrid's step: 644 groups here, 474 in its features). XLA
names ops as HLO does (`broadcast`, `dynamic-slice`), the emulator as StableHLO does
(`broadcast_in_dim`, reshapes that XLA makes bitcasts). Findings: `bench/archive/fusion_emulation.md`.
"""

from __future__ import annotations

import collections
import json
import re
import sys

# XLA's module text: a computation's header line, then one instruction per line
INSTRUCTION = re.compile(r"\s*(?:ROOT )?%?\S+ = (?:\S+|\([^)]*\)) ([a-z\-]+)\(")
FREE = ("parameter", "constant", "bitcast", "get-tuple-element", "tuple")


def emulated_groups(family: str, params: dict) -> list[list[str]]:
    """The op names of each fusion group the emulator forms while extracting features. It
    hashes a group's members into a kernel signature; the module's `hash` is swapped for
    the identity here so the members (each a tuple led by the op name) come back."""
    from costmodel.features import from_lowered
    from costmodel.features.stablehlo import fusion
    from costmodel.measure.harness import placement
    from costmodel.training import corpus

    recorded: list = []
    groups = fusion.Fusions.groups

    def recording(self):
        found = groups(self)
        recorded.extend(found)
        return found

    fusion.hash, fusion.Fusions.groups = (lambda members: members), recording
    try:
        traced, lowered = corpus.lower(placement("cpu", ""), family, params)
        from_lowered(traced, lowered, backend="cpu")
    finally:
        del fusion.hash
        fusion.Fusions.groups = groups
    return [[repr_.split("'")[1] for repr_ in members] for *_, members in recorded], lowered


def xla_fusions(hlo: str) -> tuple[list[list[str]], collections.Counter]:
    """The op names of each fused computation of XLA's module, and the unfused ops."""
    fused, unfused = [], collections.Counter()
    for block in hlo.split("\n\n"):
        lines = block.strip().split("\n")
        name = lines[0].split(" ")[0]
        ops = [m.group(1) for line in lines[1:] if (m := INSTRUCTION.match(line))
               and m.group(1) not in FREE]
        if "fused" in name or "fusion" in name or "wrapped" in name:
            if ops:
                fused.append(ops)
        else:
            unfused.update(ops)
    return fused, unfused


def main() -> None:
    from costmodel.measure.user_modules import import_module_or_file

    module, family, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    import_module_or_file(module)
    emulated, lowered = emulated_groups(family, params)
    xla, unfused = xla_fusions(lowered.compile().as_text())
    print(f"{family} {params}: emulated groups {len(emulated)} holding "
          f"{sum(map(len, emulated))} ops; XLA fusions {len(xla)} holding {sum(map(len, xla))}")
    print("XLA's ops outside fusions:", dict(unfused.most_common(10)))
    emulated_ops = collections.Counter(op for group in emulated for op in group)
    xla_ops = collections.Counter(op.replace("-", "_") for group in xla for op in group)
    print(f"{'op':24} {'emulated':>9} {'XLA':>9}")
    for op in sorted(emulated_ops | xla_ops, key=lambda o: -(emulated_ops[o] + xla_ops[o]))[:25]:
        print(f"{op:24} {emulated_ops[op]:9} {xla_ops[op]:9}")
    sizes = [collections.Counter(min(len(g), 5) for g in found) for found in (emulated, xla)]
    print("fusions by size (5: five or more): emulated", dict(sorted(sizes[0].items())),
          "XLA", dict(sorted(sizes[1].items())))


if __name__ == "__main__":
    main()
