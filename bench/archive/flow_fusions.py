"""What grows inside XLA:CPU's fusions as the outside bench's Distrax spline flow deepens:
compiles the flow at each depth (no timing) and counts the optimized module's
instructions, its fused computations and the op kinds of the largest one.

    /path/to/venv-with-outside-extra/bin/python bench/archive/flow_fusions.py 4 8 16

Needs the `outside` extra (distrax). bench/FINDINGS.md, "Why the Distrax flow's compile
grows with the square of its depth".
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def fused_op_counts(hlo_text: str) -> dict[str, collections.Counter]:
    """Op kinds of each computation of optimized HLO text, by computation name."""
    comps: dict[str, collections.Counter] = {}
    current = None
    for line in hlo_text.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line.strip()) if (
            line and not line.startswith(" ")) else None
        if header:
            current = header.group(1)
            comps[current] = collections.Counter()
        elif current and "=" in line:
            op = re.search(r"= \S+ (\w[\w\-]*)\(", line)
            if op:
                comps[current][op.group(1)] += 1
    return comps


def main() -> None:
    import jax

    from costmodel.measure.user_modules import import_module_or_file
    from costmodel.training import corpus

    import_module_or_file(str(HERE.parent / "evaluations" / "outside_programs.py"))
    family = corpus.get_family("outside_distrax_spline_flow_train_step")
    for layers in [int(a) for a in sys.argv[1:]] or [4, 8, 16]:
        fn, args = family.build(batch=256, bins=8, dim=16, hidden=128, layers=layers)
        comps = fused_op_counts(jax.jit(fn).lower(*args).compile().as_text())
        fused = {k: v for k, v in comps.items() if "fused" in k or "fusion" in k}
        largest = max(fused, key=lambda k: sum(fused[k].values()))
        print(f"{layers} layers: {sum(sum(v.values()) for v in comps.values())} instructions, "
              f"{sum(sum(v.values()) for v in fused.values())} in {len(fused)} fused "
              f"computations; largest {sum(fused[largest].values())}: "
              f"{dict(fused[largest].most_common(6))}")


if __name__ == "__main__":
    main()
