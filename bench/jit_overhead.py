"""Cost of `costmodel.jit` against `jax.jit`: per warm call, and on the first call.

Warm calls: for pytrees of 1, 10 and 2000 leaves, both jitted functions are compiled once,
then called in interleaved rounds (each round times a batch of calls of each, in
alternating order); the result is the median per-call time of each and their ratio.
Nothing compiles after the warm-up, so the numbers are dispatch cost only.

First call: for each program of `costmodel demo`, a fresh function each time, the first
call of `costmodel.jit(f, budget_seconds=<far above it>)` (trace, lower, predict,
compile, run) against that of `jax.jit(f)` (trace, lower, compile, run), interleaved in
alternating order, the persistent compilation cache off; the median of each and their
ratio per program, and what the guard adds: the difference of the medians of each first
call's seconds outside the backend compile (wall seconds less the compile's, which jax
reports as a monitoring event; each first call must compile exactly once), as a share of
jax.jit's whole first call. The compile is of the same program in both, so this share is
the overhead without the compile's own variance. These time compiles: run them alone on
the machine.

Usage:
    python bench/jit_overhead.py --json bench/results/jit_overhead.json [--only warm|first]

With `--only`, the other part of an existing `--json` file is kept. `--trace-hook` times
the guard's fallback (it predicts in a trace of its own, from a lowering of its own: what
it does where jax's internals differ from the version it is pinned to).
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


# far above any demo program's predicted compile: the guard predicts and lets it compile
BUDGET_SECONDS = 1e6


BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_compiles: list[float] = []  # wall seconds of each backend compile, as jax reports them


def _listen(name: str, seconds: float, **_) -> None:
    if name == BACKEND_COMPILE:
        _compiles.append(seconds)


def _first_call_seconds(jit, fn, args) -> tuple[float, float, float]:
    """Wall and CPU seconds (this process's threads, XLA's included) of the first call,
    and its wall seconds outside the one backend compile it makes."""
    import jax

    before = len(_compiles)
    start, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(jit(fn)(*args))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    compiles = _compiles[before:]
    if len(compiles) != 1:
        raise RuntimeError(f"a first call compiled {len(compiles)} times, not once")
    return wall, cpu, wall - compiles[0]


def measure_first_call(repeats: int) -> dict:
    """Median first-call seconds of each demo program under both jits, and their ratio."""
    import warnings

    import jax
    import jax.numpy as jnp

    import costmodel
    from costmodel._demo import examples

    jax.config.update("jax_enable_compilation_cache", False)
    jax.monitoring.register_event_duration_secs_listener(_listen)

    def guarded(fn):
        return costmodel.jit(fn, budget_seconds=BUDGET_SECONDS)

    def concrete(args):
        return jax.block_until_ready(jax.tree_util.tree_map(
            lambda s: jnp.zeros(s.shape, s.dtype), args))

    # one-off costs of the process (the first compile, loading the model) paid here
    for jit in (jax.jit, guarded):
        _first_call_seconds(jit, lambda x: x * 2.0, (jnp.ones(3),))
    rows = []
    for name, build in examples():
        times: dict[str, list[tuple[float, float, float]]] = {"jax.jit": [],
                                                               "costmodel.jit": []}
        for repeat in range(repeats):
            order = [("jax.jit", jax.jit), ("costmodel.jit", guarded)]
            for label, jit in order if repeat % 2 == 0 else order[::-1]:
                fn, shapes = build()  # a new function: nothing is cached
                args = concrete(shapes)
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # the guard must not warn here
                    times[label].append(_first_call_seconds(jit, fn, args))
        row = {"program": name}
        for part, index in (("", 0), ("cpu_", 1)):
            ours, theirs = (statistics.median(t[index] for t in times[k])
                            for k in ("costmodel.jit", "jax.jit"))
            row.update({f"jax_jit_{part}s": round(theirs, 4),
                        f"costmodel_jit_{part}s": round(ours, 4),
                        f"{part}ratio": round(ours / theirs, 3)})
        # What the guard adds outside the compile, which is the same in both (the same
        # program): free of the compile's variance, as a share of jax.jit's first call.
        ours, theirs = (statistics.median(t[2] for t in times[k])
                        for k in ("costmodel.jit", "jax.jit"))
        added = ours - theirs
        row.update({"jax_jit_outside_compile_s": round(theirs, 4),
                    "costmodel_jit_outside_compile_s": round(ours, 4),
                    "added_s": round(added, 4),
                    "added_share": round(added / row["jax_jit_s"], 3)})
        rows.append(row)
        print(f"{name:<26} jax.jit {row['jax_jit_s']:.3f} s, costmodel.jit "
              f"{row['costmodel_jit_s']:.3f} s, ratio {row['ratio']:.3f} "
              f"(CPU seconds: {row['cpu_ratio']:.3f}); added outside the compile "
              f"{added * 1e3:.1f} ms, {row['added_share']:.1%}", flush=True)
    out = {"repeats": repeats, "budget_seconds": BUDGET_SECONDS, "programs": rows,
           "median_added_share": statistics.median(row["added_share"] for row in rows),
           "max_added_share": max(row["added_share"] for row in rows)}
    for part in ("", "cpu_"):
        ratios = [row[f"{part}ratio"] for row in rows]
        out[f"{part}median_ratio"] = round(statistics.median(ratios), 3)
        out[f"{part}max_ratio"] = max(ratios)
    return out


def measure_warm(rounds: int) -> list[dict]:
    results = [measure(leaves, rounds, calls)
               for leaves, calls in ((1, 2000), (10, 1000), (2000, 20))]
    for row in results:
        print(f"{row['leaves']:>5} leaves: jax.jit {row['jax_jit_ms']:.4f} ms, "
              f"costmodel.jit {row['costmodel_jit_ms']:.4f} ms, ratio {row['ratio']:.3f}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="warm-call rounds")
    parser.add_argument("--repeats", type=int, default=5, help="first calls of each jit")
    parser.add_argument("--only", choices=("warm", "first"), help="measure one part")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--trace-hook", action="store_true",
                        help="time the guard's fallback path")
    args = parser.parse_args(argv)
    if args.trace_hook:
        from costmodel import _guard

        _guard._jit_with_miss = lambda *_: None
    old = {}
    if args.json and args.only and Path(args.json).exists():
        old = json.loads(Path(args.json).read_text())
    results = {
        "guard_path": "trace hook" if args.trace_hook else "call path",
        "warm_call": measure_warm(args.rounds) if args.only != "first"
        else old.get("warm_call"),
        "first_call": measure_first_call(args.repeats) if args.only != "warm"
        else old.get("first_call"),
    }
    if results["first_call"] is not None:
        first = results["first_call"]
        print(f"first call, median ratio over the programs: {first['median_ratio']:.3f} "
              f"(max {first['max_ratio']:.3f}); in CPU seconds "
              f"{first['cpu_median_ratio']:.3f} (max {first['cpu_max_ratio']:.3f}); added "
              f"outside the compile: median {first['median_added_share']:.1%} of jax.jit's "
              f"first call (max {first['max_added_share']:.1%})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
