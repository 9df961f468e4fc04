"""Whether XLA:CPU compiles a repeated fusion once: N layers of `x @ w` then elementwise
math, compiled four ways, so each has about 2N fusions of the same ops.

    python bench/archive/kernel_reuse.py [--layers 50 150] [--repeats 3] [--json PATH]

- same: every layer's weight has one shape and its math the same constants, so the
  fusions are identical;
- shapes: layer i's weight is (64 + i) x (65 + i), so no two fusions share shapes;
- constants: one shape, but layer i scales by 0.5 + 0.001 i, a constant inside its fusion;
- stacked: as same, but the weights are one (N, 64, 64) array and layer i slices row i
  out of it (as layer stacks do), so each layer adds a slice at an offset of its own.

Compiled in turn, `repeats` rounds, each a new function with the compilation cache off.
If fusions compiled one by one, the four would take about as long. Each line also gives
the distinct fused computations of XLA's optimized module (`distinct_kernels.counts`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from distinct_kernels import counts

KINDS = ("same", "shapes", "constants", "stacked")


def program(kind: str, layers: int):
    """The function and its abstract arguments."""
    import jax
    import jax.numpy as jnp

    def fn(x, weights):
        for i in range(len(weights)):
            y = x @ weights[i]
            scale = 0.5 + 0.001 * i if kind == "constants" else 0.5
            x = jnp.tanh(y) * scale + jnp.sin(y) * 0.25 - 1.0
        return x

    if kind == "shapes":
        weights = [jax.ShapeDtypeStruct((64 + i, 65 + i), jnp.float32) for i in range(layers)]
    elif kind == "stacked":
        weights = jax.ShapeDtypeStruct((layers, 64, 64), jnp.float32)
    else:
        weights = [jax.ShapeDtypeStruct((64, 64), jnp.float32)] * layers
    return fn, (jax.ShapeDtypeStruct((8, 64), jnp.float32), weights)


def compile_once(kind: str, layers: int) -> tuple[float, dict[str, int]]:
    """Seconds to compile, and the fusions of XLA's optimized module (`counts`)."""
    import jax

    fn, args = program(kind, layers)
    lowered = jax.jit(fn).lower(*args)
    start = time.perf_counter()
    compiled = lowered.compile()
    seconds = time.perf_counter() - start
    return seconds, counts(compiled.as_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[50, 150])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    seconds: dict[str, list[float]] = {}
    fusions: dict[str, int] = {}
    distinct: dict[str, int] = {}
    for _ in range(args.repeats):
        for layers in args.layers:
            for kind in KINDS:
                key = f"{kind} {layers}"
                took, found = compile_once(kind, layers)
                fusions[key], distinct[key] = found["fusion_instructions"], found["distinct_fused"]
                seconds.setdefault(key, []).append(took)
    median = {key: statistics.median(values) for key, values in seconds.items()}
    for key, values in seconds.items():
        print(f"{key:14s} fusions {fusions[key]:4d} distinct {distinct[key]:4d}  "
              f"median {median[key]:6.3f} s  "
              + " ".join(f"{v:6.3f}" for v in values))
    if len(args.layers) > 1:
        low, high = min(args.layers), max(args.layers)
        per = {kind: (median[f"{kind} {high}"] - median[f"{kind} {low}"])
               / (fusions[f"{kind} {high}"] - fusions[f"{kind} {low}"]) * 1e3 for kind in KINDS}
        print("ms per added fusion: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()))
    if args.json:
        args.json.write_text(json.dumps({"jax": jax.__version__, "repeats": args.repeats,
                                         "seconds": seconds, "fusions": fusions,
                                         "distinct_fused": distinct}, indent=1)
                             + "\n")


if __name__ == "__main__":
    main()
