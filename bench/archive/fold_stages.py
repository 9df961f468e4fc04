"""What a folded element costs before XLA and inside it: the measurement behind
`features.constant_folding.EVALUATOR_SHARE`.

    python bench/archive/fold_stages.py [--side 2048] [--steps 6] [--repeats 3] [--json PATH]

Four programs return `x @ table` for a captured `table`: the captured table itself, the
table after `steps` elementwise ops (tanh, scale, shift in turn; StableHLO's folders
compute them while the module is converted for XLA), the matrix product of two captured tables, and
that product after the same ops (XLA's constant-folding pass computes them, having
computed the product). Compiled in turn, `repeats` rounds, each a new function with the
compilation cache off. The steps' cost per element is the median difference to the
program without them, divided by the elements they touch; the share is XLA's over StableHLO's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from fold_kinds import compile_seconds  # `x @ table` for an (8, side) x, timed


def programs(side: int, steps: int) -> dict:
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    left, right = (rng.standard_normal((side, side)).astype(np.float32) / side
                   for _ in range(2))

    def mapped(table):
        for step in range(steps):
            table = (jnp.tanh(table), table * 0.5, table + 0.1)[step % 3]
        return table

    return {
        "table": lambda: jnp.asarray(left),
        "table, mapped": lambda: mapped(jnp.asarray(left)),
        "product": lambda: jnp.asarray(left) @ jnp.asarray(right),
        "product, mapped": lambda: mapped(jnp.asarray(left) @ jnp.asarray(right)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    made = programs(args.side, args.steps)
    times: dict[str, list[float]] = {name: [] for name in made}
    for _ in range(args.repeats):
        for name, make in made.items():
            times[name].append(compile_seconds(make, lambda table: table, args.side))
    median = {name: statistics.median(values) for name, values in times.items()}
    elements = args.steps * args.side ** 2
    per_element = {
        "stablehlo": (median["table, mapped"] - median["table"]) / elements,
        "xla": (median["product, mapped"] - median["product"]) / elements,
    }
    result = {"side": args.side, "steps": args.steps, "repeats": args.repeats,
              "jax": jax.__version__, "seconds": times,
              "ns_per_element": {k: v * 1e9 for k, v in per_element.items()},
              "share": per_element["xla"] / per_element["stablehlo"]}
    for name, values in times.items():
        print(f"{name:16s} " + " ".join(f"{v:6.3f}" for v in values))
    print(f"ns per element: before XLA {result['ns_per_element']['stablehlo']:.1f}, "
          f"XLA's interpreter {result['ns_per_element']['xla']:.1f}; "
          f"share {result['share']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
