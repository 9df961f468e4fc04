"""Sweeps: measure every program of the corpus (or a subset), resumably and in parallel.

Each program is measured in its own fresh process (`runner.run_child`). Rows are written
by the driving process the moment a measurement returns, so `kill -9` of the sweep loses
at most the programs in flight, and rerunning the same command skips every key already
in the output folder. Workers only wait on their measurement processes, so local
parallelism uses threads; `dask_address` runs the same function on a dask.distributed
cluster through joblib's Dask backend.
"""

from __future__ import annotations

import os
import platform
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from costmodel.features import Placement

from ..store import dataset
from .machine import environment
from .runner import DEFAULT_MEMORY_LIMIT, DEFAULT_TIMEOUT, run_child

# XLA compiles with more than one thread, so concurrent measurements on a 2-core machine
# share cores and inflate each other's times: one worker is the default there. The shipped
# data was measured two at a time and carries `ref_seconds` to normalize (dataset card).
DEFAULT_WORKERS = 1


@dataclass
class SweepConfig:
    backend: str = "cpu"
    target: str = ""
    families: tuple[str, ...] | None = None
    out: str = "sweeps/cpu"
    budget_minutes: float | None = None
    workers: int = DEFAULT_WORKERS
    timeout: float = DEFAULT_TIMEOUT
    memory_limit: int = DEFAULT_MEMORY_LIMIT
    max_repeats: int = 3
    modules: tuple[str, ...] = ()
    limit: int | None = None
    seed: int = 0
    dask_address: str | None = None
    progress: bool = True
    retry_errors: bool = False


@dataclass
class SweepSummary:
    planned: int = 0
    skipped: int = 0
    measured: int = 0
    statuses: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    shard: str = ""
    stopped_by_budget: bool = False


def plan(config: SweepConfig) -> tuple[list[tuple[str, dict]], int]:
    """Programs still to measure, and how many of the sweep's programs are done already.

    The sweep's programs are the corpus (or `families`) in one fixed shuffled order, so
    drift spreads over families; `limit` keeps the first N of that order. Rerunning the
    same command therefore resumes the same N programs instead of adding N more.
    """
    from .user_modules import import_module_or_file

    for module in config.modules:
        import_module_or_file(module)
    from .. import corpus

    programs = corpus.programs(config.families)
    random.Random(config.seed).shuffle(programs)
    if config.limit is not None:
        programs = programs[:config.limit]
    out = Path(config.out)
    done = dataset.done_keys([out], skip_errors=config.retry_errors) if out.exists() else set()
    todo = [(fam, params) for fam, params in programs
            if dataset.program_key(fam, params, config.backend, config.target) not in done]
    return todo, len(programs) - len(todo)


def measure_program(family: str, params: dict, backend: str, target: str, timeout: float,
                    memory_limit: int, max_repeats: int, modules: tuple[str, ...] = ()) -> dict:
    """Measure one program in a fresh process and return its dataset row (any status)."""
    spec = {"family": family, "params": params, "backend": backend, "target": target,
            "max_repeats": max_repeats, "modules": list(modules)}
    result = run_child(spec, timeout=timeout, memory_limit=memory_limit)
    return dataset.make_row(family, params, backend, target, result, environment())


def _shard_path(config: SweepConfig) -> Path:
    name = Placement(config.backend, config.target).label
    return Path(config.out) / f"rows-{name}-{platform.node()}-{os.getpid()}.jsonl"


def run_sweep(config: SweepConfig) -> SweepSummary:
    """Run (or resume) a sweep; returns what happened. Rows land in `config.out`."""
    from joblib import Parallel, delayed, parallel_config
    from tqdm import tqdm

    todo, skipped = plan(config)
    summary = SweepSummary(planned=len(todo), skipped=skipped)
    if not todo:
        return summary
    started = time.monotonic()
    deadline = started + 60 * config.budget_minutes if config.budget_minutes else None

    def tasks():
        for family, params in todo:
            if deadline is not None and time.monotonic() > deadline:
                summary.stopped_by_budget = True
                return
            yield delayed(measure_program)(family, params, config.backend, config.target,
                                           config.timeout, config.memory_limit,
                                           config.max_repeats, tuple(config.modules))

    shard = _shard_path(config)
    summary.shard = str(shard)
    client = None
    if config.dask_address:
        from distributed import Client

        client = Client(config.dask_address)
        backend = parallel_config(backend="dask")
        n_jobs = -1
    else:
        backend = parallel_config(backend="threading")
        n_jobs = config.workers
    try:
        with backend, dataset.ShardWriter(shard) as writer, tqdm(
                total=len(todo), disable=not config.progress, unit="prog",
                desc=f"sweep {config.backend}{'/' + config.target if config.target else ''}") as bar:
            runner = Parallel(n_jobs=n_jobs, return_as="generator_unordered",
                              pre_dispatch="n_jobs")
            for row in runner(tasks()):
                writer.append(row)
                summary.measured += 1
                summary.statuses[row["status"]] += 1
                bar.set_postfix_str(f"{row['family']} {row['status']} "
                                    f"{row.get('compile_seconds') or 0:.2f}s", refresh=False)
                bar.update()
    finally:
        if client is not None:
            client.close()
    summary.seconds = time.monotonic() - started
    return summary
