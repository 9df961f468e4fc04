"""What does a prediction cost, next to JAX's own trace+lower and the compile itself?

For each program: trace+lower alone, `costmodel.predict` (which traces, lowers, extracts
features and runs the model), and the real compile; new function objects each time,
interleaved, median of 5 (compile: median of 2). Reports each program's StableHLO op
count, predict/(trace+lower) and, for programs compiling in 5 s or more, predict/compile;
then the median ratio over the programs.

    python bench/predict_overhead.py [--quick] [--no-compile] [--out FILE] [--json FILE]

`--quick` skips the ~2-minute grad compile; `--no-compile` skips every compile (the
ratio to trace+lower alone, e.g. beside a timing sweep); `--out` also writes the table
to FILE (`bench/results/predict_overhead.txt`), `--json` the rows and the median ratio
(`bench/results/predict_overhead.json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax import lax

import costmodel
from costmodel.features import extract


def programs(quick: bool = False):
    def unrolled(steps):
        def f(x, w):
            for _ in range(steps):
                x = jnp.tanh(x @ w) + 0.1 * x
            return x
        return f
    def scanned(steps):
        def f(x, w):
            return lax.scan(lambda c, _: (jnp.tanh(c @ w) + 0.1 * c, None), x, None,
                            length=steps)[0]
        return f
    args = (jax.ShapeDtypeStruct((32, 64), jnp.float32),
            jax.ShapeDtypeStruct((64, 64), jnp.float32))
    for steps in (10, 100, 300, 1000):
        yield f"unrolled {steps}", (lambda s=steps: unrolled(s)), args
    # six StableHLO ops a step: programs of about 1k, 10k and 60k ops
    for ops in (1_000, 10_000, 60_000):
        yield f"unrolled {ops // 1000}k ops", (lambda s=ops // 6: unrolled(s)), args
    yield "scan 1000", (lambda: scanned(1000)), args
    if not quick:
        yield "grad unrolled 300", (lambda: jax.grad(lambda x, w: unrolled(300)(x, w).sum())), args


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(quick: bool = False, compile_too: bool = True, out: str | None = None,
         json_out: str | None = None) -> None:
    lines: list[str] = []
    rows: list[dict] = []

    def print(line: str = "", **_) -> None:  # the table, to stdout and kept for `out`
        lines.append(line)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    jax.config.update("jax_enable_compilation_cache", False)
    costmodel.predict(lambda x: x + 1, jnp.ones(3))  # load the model once
    print(f"{'program':<22}{'ops':>7}{'trace+lower':>12}{'predict':>10}{'ratio':>7}"
          f"{'compile':>10}{'pred/compile':>13}")
    ratios = []
    for name, make, args in programs(quick):
        lower_t, predict_t = [], []
        for _ in range(5):
            lower_t.append(timed(lambda: jax.jit(make()).trace(*args).lower()))
            predict_t.append(timed(lambda: costmodel.predict(make(), *args)))
        lo, pr = statistics.median(lower_t), statistics.median(predict_t)
        ratios.append(pr / lo)
        ops = extract(make(), *args, backend="cpu")["hlo_ops"]
        comp = statistics.median(
            timed(lambda: jax.jit(make()).trace(*args).lower().compile()) for _ in range(2)
        ) if compile_too else float("nan")
        share = f"{pr / comp:.1%}" if comp >= 5 else "-"
        rows.append({"program": name, "ops": int(ops), "trace_lower_s": round(lo, 5),
                     "predict_s": round(pr, 5), "ratio": round(pr / lo, 3),
                     "compile_s": round(comp, 3) if compile_too else None})
        shown = f"{comp:>9.2f}s" if compile_too else f"{'-':>10}"
        print(f"{name:<22}{ops:>7.0f}{lo:>11.3f}s{pr:>9.3f}s{pr / lo:>7.2f}{shown}{share:>13}",
              flush=True)
    print(f"median ratio predict / trace+lower: {statistics.median(ratios):.2f}")
    if out:
        Path(out).write_text("\n".join(lines) + "\n")
    if json_out:
        Path(json_out).write_text(json.dumps({
            "quick": quick, "compile": compile_too, "programs": rows,
            "median_ratio": round(statistics.median(ratios), 3)}, indent=1) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the grad program")
    parser.add_argument("--no-compile", action="store_true", help="time no compile")
    parser.add_argument("--out", help="also write the table here")
    parser.add_argument("--json", help="also write the rows here, as JSON")
    args = parser.parse_args()
    main(quick=args.quick, compile_too=not args.no_compile, out=args.out, json_out=args.json)
