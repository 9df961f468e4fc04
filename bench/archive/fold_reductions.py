"""What a folded reduction costs XLA's constant folding, by its reducer: issue 55's LP
solver, whose captured constraint matrix is rescaled while compiling (`mpax`'s Ruiz
equilibration), spent 7-28 s in the `constant_folding` pass.

    python bench/archive/fold_reductions.py [--side 1024] [--repeats 3] [--json PATH]

As `fold_kinds.py` measures an op kind (its programs and timing, the op in a call of its
own so XLA's interpreter folds it): each program returns `x @ table`, the table a captured
one after a reduction broadcast back to the table's shape (broadcasts are not folded), and
a reduction's cost is its program's median compile time less the median without it,
divided by the elements it reads.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from fold_kinds import compile_seconds


def kinds() -> dict:
    """Reduction -> (table -> table after it, elements read in tables' sizes)."""
    import jax.numpy as jnp
    from jax import lax

    return {
        "nothing": (lambda t: t, 0),
        "multiply": (lambda t: t * 2.0, 2),
        "sum_rows": (lambda t: jnp.broadcast_to(t.sum(axis=0), t.shape), 1),
        "sum_cols": (lambda t: jnp.broadcast_to(t.sum(axis=1, keepdims=True), t.shape), 1),
        "max_rows": (lambda t: jnp.broadcast_to(t.max(axis=0), t.shape), 1),
        "max_cols": (lambda t: jnp.broadcast_to(t.max(axis=1, keepdims=True), t.shape), 1),
        "max_all": (lambda t: jnp.broadcast_to(t.max(), t.shape), 1),
        "min_rows": (lambda t: jnp.broadcast_to(t.min(axis=0), t.shape), 1),
        "prod_rows": (lambda t: jnp.broadcast_to(t.prod(axis=0), t.shape), 1),
        # two arrays read: the table and the iota of indices beside it
        "argmax_rows": (lambda t: jnp.broadcast_to(t.argmax(axis=0), t.shape).astype(t.dtype),
                        2),
        "max_pool": (lambda t: jnp.repeat(jnp.repeat(lax.reduce_window(
            t, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID"), 2, axis=0), 2, axis=1), 1),
        "sum_pool": (lambda t: jnp.repeat(jnp.repeat(lax.reduce_window(
            t, 0.0, lax.add, (2, 2), (2, 2), "VALID"), 2, axis=0), 2, axis=1), 1),
        # an elementwise op of a broadcast scalar stays a broadcast (XLA's simplifier
        # sinks it), and the reduction over it folds as over a table
        "max_rows_of_abs_zeros": (lambda t: jnp.broadcast_to(
            jnp.abs(jnp.zeros_like(t)).max(axis=0), t.shape) + t, 1),
        # ... except over every dimension of a broadcast scalar, which it simplifies away
        "max_all_of_abs_zeros": (lambda t: jnp.abs(jnp.zeros_like(t)).max() + t, 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_compilation_cache", False)
    table = np.random.default_rng(0).standard_normal((args.side, args.side)).astype(np.float32)
    made = kinds()
    times = {kind: [] for kind in made}
    for _ in range(args.repeats):  # kinds interleaved, a new function each compile
        for kind, (op, _) in made.items():
            times[kind].append(compile_seconds(lambda: jnp.asarray(table), op, args.side, True))
    base = statistics.median(times["nothing"])
    ns = {kind: (statistics.median(v) - base) / (max(made[kind][1], 1) * args.side ** 2) * 1e9
          for kind, v in times.items() if kind != "nothing"}
    for kind, v in ns.items():
        print(f"{kind:9s} {v:8.1f} ns per element read, {v / ns['multiply']:6.1f} multiplies")
    out = {"side": args.side, "jax": jax.__version__, "ns_per_element": ns, "seconds": times}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
