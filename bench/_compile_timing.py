"""Compile timing in this process for benches that compare variants of one program.

Each compile starts from a new function object (never a cache hit), the variants of a
program interleave round by round with the one that goes first rotating, and the median
of the rounds is kept: the machine drifts between batches minutes apart, so variants are
only ever compared within one round. The caller turns the persistent cache off, or
`with_reference` does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Mapping

import jax

Build = Callable[[], tuple[Callable, tuple]]


def compile_seconds(fn, args) -> float:
    """Seconds of one XLA compile of `fn` at `args` (tracing and lowering off the clock)."""
    lowered = jax.jit(fn).trace(*args).lower()
    start = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - start


def fresh(fn):
    return lambda *a: fn(*a)  # a new function object: never a cache hit


def interleaved(builds: Mapping[str, Build], repeats: int) -> dict[str, list[float]]:
    """Compile seconds of each variant over `repeats` rounds; `build()` gives (fn, args)."""
    names = list(builds)
    times = {name: [] for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            fn, args = builds[name]()
            times[name].append(compile_seconds(fresh(fn), args))
    return times


def with_reference(builds: Mapping[str, Build], repeats: int) -> dict[str, list[float]]:
    """`interleaved` over the reference program (key "(reference)") and `builds`, with the
    persistent cache off and the backend's first-compile costs taken off the clock."""
    from costmodel.measure.reference import build_reference

    jax.config.update("jax_enable_compilation_cache", False)
    compile_seconds(*build_reference())
    return interleaved({"(reference)": build_reference, **builds}, repeats)


def medians(times: Mapping[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in times.items()}


def rounds_command(run: Callable[[int], dict], description: str) -> None:
    """A bench's command line: `--rounds N` for `run`, `--json PATH` to keep its result."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = run(args.rounds)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
