"""Calibrate the program corpus: compile a sample of grid points once and time them.

Each selected point is built, traced, lowered and compiled once in this process with
the persistent compilation cache off; the script prints one line per point and a
per-family summary (count, sum, median, max of compile seconds). It is a sizing aid
for the grids, not the measurement harness (that one uses fresh subprocesses).

Usage:
    python bench/corpus_calibrate.py --every 5 --largest
    python bench/corpus_calibrate.py --family loop --every 3 --skip-over 30
    python bench/corpus_calibrate.py --family mlp --index 0 7 --jsonl out.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax

from costmodel.training import corpus


def _select(
    family: corpus.Family, every: int, offset: int, largest: bool, index: list[int] | None
) -> list[int]:
    n = len(family.grid)
    if index is not None:
        return sorted({i for i in index if 0 <= i < n})
    chosen = {i for i in range(n) if every > 0 and i % every == offset % every}
    if largest and n:
        chosen.add(n - 1)
    return sorted(chosen)


def _compile_once(family: corpus.Family, params: dict) -> dict[str, float]:
    """Lowers and compiles one point; wall seconds and this process's CPU seconds."""
    fn, args = corpus.build(family.name, params)
    with jax.enable_x64(family.x64):
        t0 = time.perf_counter()
        lowered = jax.jit(fn).trace(*args).lower()
        t1, c1 = time.perf_counter(), time.process_time()
        lowered.compile()
        t2, c2 = time.perf_counter(), time.process_time()
    # CPU time is the steadier figure when the machine is shared with other work.
    return {"lower_s": t1 - t0, "compile_s": t2 - t1, "compile_cpu_s": c2 - c1}


def _row(label: str, values: list[float]) -> str:
    return (
        f"{label:20s} {len(values):5d} {sum(values):9.2f} "
        f"{statistics.median(values):9.3f} {max(values):9.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    """Runs the calibration; returns a process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", nargs="*", help="families to sample (default: all)")
    parser.add_argument("--every", type=int, default=5, help="take every Nth grid point")
    parser.add_argument("--offset", type=int, default=0, help="index offset for --every")
    parser.add_argument("--largest", action="store_true", help="also the last grid point")
    parser.add_argument("--index", type=int, nargs="*", help="explicit grid indices")
    parser.add_argument(
        "--skip-over",
        type=float,
        default=None,
        help="skip the rest of a family once a point takes longer than this many seconds",
    )
    parser.add_argument("--jsonl", help="append one JSON record per point to this file")
    opts = parser.parse_args(argv)

    jax.config.update("jax_enable_compilation_cache", False)
    names = opts.family or list(corpus.FAMILIES)
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    slow: list[tuple[str, dict, float]] = []
    out = open(opts.jsonl, "a") if opts.jsonl else None
    try:
        for name in names:
            family = corpus.get_family(name)
            wall[name], cpu[name] = [], []
            for i in _select(family, opts.every, opts.offset, opts.largest, opts.index):
                params = family.grid[i]
                try:
                    timing = _compile_once(family, params)
                except Exception as exc:  # report and keep going: this is a sizing tool
                    print(f"{name}[{i}] {params} ERROR {type(exc).__name__}: {exc}", flush=True)
                    continue
                finally:
                    jax.clear_caches()
                seconds = timing["compile_s"]
                wall[name].append(seconds)
                cpu[name].append(timing["compile_cpu_s"])
                if seconds > 20:
                    slow.append((name, params, seconds))
                print(
                    f"{name}[{i}] {json.dumps(params)} lower={timing['lower_s']:.3f}s "
                    f"compile={seconds:.3f}s cpu={timing['compile_cpu_s']:.3f}s",
                    flush=True,
                )
                if out:
                    out.write(json.dumps({"family": name, "index": i, "params": params, **timing}))
                    out.write("\n")
                    out.flush()
                if opts.skip_over is not None and seconds > opts.skip_over:
                    print(f"{name}: skipping the rest (>{opts.skip_over}s)", flush=True)
                    break
    finally:
        if out:
            out.close()

    for title, table in (("compile wall s", wall), ("compile CPU s", cpu)):
        print(f"\n{title}\nfamily               count       sum    median       max")
        everything = [v for values in table.values() for v in values]
        for name, values in table.items():
            if values:
                print(_row(name, values))
        if everything:
            print(_row("ALL", everything))
    for name, params, seconds in slow:
        print(f"over 20 s: {name} {json.dumps(params)} {seconds:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
