"""Which folded dots are slow: a dot of two captured constants, by the form of its
contraction, compiled for the CPU beside what the shipped model predicts.

XLA folds a dot of constants while compiling. Every form below has the same flops; a
plain matrix product (lhs contracting its last dim, rhs its first, no batch dims) is
handed to a matrix library, while a transposed contraction or a batched one is evaluated
element by element. Each compile is in a fresh process with the cache off.

    python bench/archive/fold_dot_forms.py [--scale 1.0] [--json OUT]

`--scale` multiplies the constants' long dimension (1.0: 17.2 GFLOP per dot; the slow
forms then take minutes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

FORMS = ("plain_square", "plain_tall", "transposed_rhs", "batched")


def one(form: str, scale: float) -> dict:
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    import costmodel

    jax.config.update("jax_enable_compilation_cache", False)
    rng = np.random.default_rng(0)
    rows = int(32768 * scale)

    def table(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    if form == "plain_square":  # (n, n) @ (n, n), n^3 = rows * 512^2
        n = int(round((rows * 512 * 512) ** (1 / 3)))
        a, b, spec = table(n, n), table(n, n), "ij,jk->ik"
    elif form == "plain_tall":
        a, b, spec = table(rows, 512), table(512, 512), "ij,jk->ik"
    elif form == "transposed_rhs":  # an embedding table times a projection stored (out, in)
        a, b, spec = table(rows, 512), table(512, 512), "ij,kj->ik"
    else:
        a, b, spec = table(rows // 512, 512, 512), table(rows // 512, 512, 512), "bij,bjk->bik"

    def f(ids):
        return jnp.einsum(spec, jnp.asarray(a), jnp.asarray(b)).reshape(-1)[ids].sum()

    ids = jnp.arange(16)
    predicted = costmodel.lower(f, ids).predict()
    lowered = jax.jit(f).trace(ids).lower()
    t0 = time.perf_counter()
    lowered.compile()
    return {"form": form, "measured_s": time.perf_counter() - t0,
            "predicted_s": predicted.compile_seconds,
            "fold_dot_flops": predicted.features["fold_dot_flops"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", choices=FORMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.scale)))
        return
    results = []
    for form in FORMS:
        done = subprocess.run([sys.executable, __file__, "--one", form, "--scale",
                               str(args.scale)], capture_output=True, text=True, check=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"scale": args.scale, "results": results}, indent=1)
                             + "\n")


if __name__ == "__main__":
    main()
