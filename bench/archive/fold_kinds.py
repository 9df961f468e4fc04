"""What a folded element costs by op kind, in each folding stage: the measurement behind
`features.constant_folding.KIND_COST_BEFORE_XLA` and `KIND_COST_IN_XLA`.

    python bench/archive/fold_kinds.py [--side 4096] [--repeats 3] [--json PATH]

Each program returns `x @ table` where `table` is a captured table after one op kind
(a multiply by a scalar, a transpose, a pair of converts, ...). Before XLA: the op is in
the entry function, so StableHLO's folders compute it while the module is converted.
Inside XLA: the op is in a function of its own (a nested jit), which those folders do not
look into; XLA's constant-folding pass computes it once calls are inlined. Compiled in
turn, `repeats` rounds, each a new function with the compilation cache off. A kind's cost
is its program's median compile time less the median of the program without the op,
divided by the elements the op touches as the features count them (`elements_touched`:
operands read, broadcast scalars at full size, or elements written, whichever is more),
and is reported against a multiply's in the same stage.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np


def kinds() -> dict:
    """Op kind -> (table -> table after the op, elements touched in tables' sizes)."""
    import jax.numpy as jnp

    return {
        "nothing": (lambda t: t, 0),
        "multiply": (lambda t: t * 2.0, 2),
        "add": (lambda t: t + 1.0, 2),
        "divide": (lambda t: t / 3.0, 2),
        "maximum": (lambda t: jnp.maximum(t, 0.0), 2),
        "tanh": (jnp.tanh, 1),
        "exponential": (jnp.exp, 1),
        "convert": (lambda t: t.astype(jnp.bfloat16).astype(jnp.float32), 2),
        "reshape": (lambda t: t.reshape(-1, 2 * t.shape[1]).reshape(t.shape), 2),
        "transpose": (lambda t: t.T, 1),
        "reverse": (lambda t: t[::-1], 1),
        "slice": (lambda t: t[:, : t.shape[1] // 2], 1),
        "pad": (lambda t: jnp.pad(t, ((0, 0), (0, 8))), 1),
        "concatenate": (lambda t: jnp.concatenate([t, t], axis=1), 2),
    }


def compile_seconds(table, op, side: int, in_call: bool = False) -> float:
    import jax
    import jax.numpy as jnp

    def fn(x):
        return x @ (jax.jit(op) if in_call else op)(table())

    lowered = jax.jit(fn).lower(jax.ShapeDtypeStruct((8, side), jnp.float32))
    start = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_compilation_cache", False)
    rng = np.random.default_rng(0)
    side = args.side
    square = rng.standard_normal((side, side)).astype(np.float32)
    stages = {"stablehlo": False, "xla": True}  # in a call of its own?
    made = kinds()
    times = {stage: {kind: [] for kind in made} for stage in stages}
    for _ in range(args.repeats):
        for stage, in_call in stages.items():
            for kind, (op, _) in made.items():
                times[stage][kind].append(
                    compile_seconds(lambda: jnp.asarray(square), op, side, in_call))
    per_element = {}
    for stage, by_kind in times.items():
        base = statistics.median(by_kind["nothing"])
        per_element[stage] = {
            kind: (statistics.median(values) - base) / (made[kind][1] * side ** 2) * 1e9
            for kind, values in by_kind.items() if kind != "nothing"}
    relative = {stage: {kind: ns / values["multiply"] for kind, ns in values.items()}
                for stage, values in per_element.items()}
    for stage in stages:
        print(f"{stage}: kind, ns per element touched, against a multiply, seconds")
        for kind, ns in per_element[stage].items():
            print(f"  {kind:12s} {ns:7.1f} {relative[stage][kind]:6.2f}   "
                  + " ".join(f"{v:6.2f}" for v in times[stage][kind]))
    print(f"a multiply in XLA against before it: "
          f"{per_element['xla']['multiply'] / per_element['stablehlo']['multiply']:.3f}")
    if args.json:
        result = {"side": side, "repeats": args.repeats, "jax": jax.__version__,
                  "seconds": times, "ns_per_element": per_element,
                  "against_multiply": relative,
                  "share": per_element["xla"]["multiply"] / per_element["stablehlo"]["multiply"]}
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
