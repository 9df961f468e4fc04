"""Per-call cost of `costmodel.jit` against `jax.jit` on a warm signature.

For pytrees of 1, 10 and 2000 leaves, both jitted functions are compiled once, then
called in interleaved rounds (each round times a batch of calls of each, in alternating
order); the result is the median per-call time of each and their ratio. Nothing here
compiles after the warm-up, so the numbers are dispatch cost only.

Usage:
    python bench/jit_overhead.py --json bench/results/jit_overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def _per_call_seconds(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls


def measure(leaves: int, rounds: int, calls: int) -> dict:
    import jax
    import jax.numpy as jnp

    import costmodel

    def f(tree):
        return jax.tree_util.tree_map(lambda a: a + 1.0, tree)

    tree = [jnp.ones((4,), jnp.float32) for _ in range(leaves)]
    plain, guarded = jax.jit(f), costmodel.jit(f, budget_seconds=60)
    for fn in (plain, guarded):
        jax.block_until_ready(fn(tree))  # compile (and, for the guard, advise) once
    times: dict[str, list[float]] = {"jax.jit": [], "costmodel.jit": []}
    for round_ in range(rounds):
        order = [("jax.jit", plain), ("costmodel.jit", guarded)]
        for name, fn in order if round_ % 2 == 0 else order[::-1]:
            times[name].append(_per_call_seconds(fn, (tree,), calls))
    jax_ms = statistics.median(times["jax.jit"]) * 1e3
    ours_ms = statistics.median(times["costmodel.jit"]) * 1e3
    return {"leaves": leaves, "jax_jit_ms": round(jax_ms, 5),
            "costmodel_jit_ms": round(ours_ms, 5), "ratio": round(ours_ms / jax_ms, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    results = [measure(leaves, args.rounds, calls)
               for leaves, calls in ((1, 2000), (10, 1000), (2000, 20))]
    for row in results:
        print(f"{row['leaves']:>5} leaves: jax.jit {row['jax_jit_ms']:.4f} ms, "
              f"costmodel.jit {row['costmodel_jit_ms']:.4f} ms, ratio {row['ratio']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
