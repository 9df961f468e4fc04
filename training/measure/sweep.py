"""Sweeps: measure every program of the corpus (or a subset), resumably and in parallel.

Each program is measured in its own fresh process (`runner.run_child`). Rows are written
by the driving process the moment a measurement returns, so `kill -9` of the sweep loses
at most the programs in flight, and rerunning the same command skips every key already
in the output folder. Workers only wait on their measurement processes, so local
parallelism uses threads; `dask_address` runs the same function on a dask.distributed
cluster, one measurement at a time per worker (`cluster.py` holds the rules).
"""

from __future__ import annotations

import functools
import math
import os
import platform
import random
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from costmodel.features import Placement
from costmodel.measure.machine import environment
from costmodel.measure.rows import ShardWriter, make_row, program_key
from costmodel.measure.sharding import SHARDING_PARAM

from ..store import dataset
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
    allow_concurrent: bool = False  # admit dask workers that run compiles side by side
    any_worker: bool = False  # GPU backend on dask: also workers without a GPU (deviceless)
    progress: bool = True
    retry_errors: bool = False
    # measure the programs of these dataset rows (ok rows, registered families) instead of
    # the corpus: pairs of one program on two backends
    programs_of: tuple[str, ...] = ()
    trace_phases: bool = True
    # measure each program once per strategy, sharded over the target topology's devices
    # (`sharding.py`); the strategy is one of the row's params
    shardings: tuple[str, ...] = ()


@dataclass
class SweepSummary:
    planned: int = 0
    skipped: int = 0
    measured: int = 0
    statuses: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    shard: str = ""
    stopped_by_budget: bool = False
    cut_by_budget: int = 0  # killed in flight at the budget's end; no row, measured next run


def plan(config: SweepConfig) -> tuple[list[tuple[str, dict]], int]:
    """Programs still to measure, and how many of the sweep's programs are done already.

    The sweep's programs are the corpus (or `families`) in one fixed shuffled order, so
    drift spreads over families; `limit` keeps the first N of that order. Rerunning the
    same command therefore resumes the same N programs instead of adding N more.
    """
    from costmodel.measure.user_modules import import_module_or_file

    for module in config.modules:
        import_module_or_file(module)
    from .. import corpus

    if config.programs_of:
        programs = programs_of(config.programs_of, config.families)
    else:
        programs = corpus.programs(config.families)
    if config.shardings:
        programs = [(fam, {**params, SHARDING_PARAM: strategy})
                    for fam, params in programs for strategy in config.shardings]
    random.Random(config.seed).shuffle(programs)
    if config.limit is not None:
        programs = programs[:config.limit]
    out = Path(config.out)
    done = dataset.done_keys([out], skip_errors=config.retry_errors) if out.exists() else set()
    todo = [(fam, params) for fam, params in programs
            if program_key(fam, params, config.backend, config.target) not in done]
    return todo, len(programs) - len(todo)


def programs_of(paths, families=None) -> list[tuple[str, dict]]:
    """(family, params) of the ok rows in the datasets at `paths` whose family is registered
    (and in `families` when given), each once, in the order of their compile seconds (the
    sweep shuffles them as it does the corpus)."""
    import json

    from .. import corpus

    rows = dataset.load(list(paths))
    rows = rows[rows["status"] == "ok"].sort_values("compile_seconds", kind="stable")
    known = set(corpus.FAMILIES) if families is None else set(families) & set(corpus.FAMILIES)
    seen, out = set(), []
    for family, params in zip(rows["family"], rows["params"]):
        if family in known and (family, params) not in seen:
            seen.add((family, params))
            out.append((family, json.loads(params)))
    return out


def measure_program(family: str, params: dict, backend: str, target: str, timeout: float,
                    memory_limit: int, max_repeats: int, modules: tuple[str, ...] = (),
                    cpus: tuple[int, ...] | None = None, trace_phases: bool = True) -> dict:
    """Measure one program in a fresh process and return its dataset row (any status).

    With `cpus`, the measurement process runs on those CPUs only, and the row says so.
    """
    spec = {"family": family, "params": params, "backend": backend, "target": target,
            "max_repeats": max_repeats, "modules": list(modules), "trace_phases": trace_phases}
    env = environment()
    if cpus:
        spec["cpus"] = list(cpus)
        env["cpu_count"] = len(cpus)
    result = run_child(spec, timeout=timeout, memory_limit=memory_limit)
    return make_row(family, params, backend, target, result, env)


def _shard_path(config: SweepConfig) -> Path:
    name = Placement(config.backend, config.target).label
    return Path(config.out) / f"rows-{name}-{platform.node()}-{os.getpid()}.jsonl"


class _ThreadPool:
    """Local measurements on threads: each only waits on its own measurement process."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._workers = workers

    def slots(self) -> int:
        return self._workers

    def submit(self, measure, *args):
        return self._pool.submit(measure, *args)

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)


def _pool(config: SweepConfig):
    if not config.dask_address:
        return _ThreadPool(config.workers)
    from .dask_pool import DaskPool

    needs_gpu = config.backend == "gpu" and not config.any_worker
    return DaskPool(config.dask_address, needs_gpu, config.allow_concurrent)


def run_sweep(config: SweepConfig) -> SweepSummary:
    """Run (or resume) a sweep; returns what happened. Rows land in `config.out`.

    No more programs are in flight than the pool has slots (threads, or admitted dask
    workers), and each is given at most the budget left when it starts as its time
    limit, so `budget_minutes` bounds the measurements in flight as well as the number
    started. A program killed by the budget rather than by its own timeout writes no
    row: the next run measures it.

    Raises:
        ClusterRefused: on a dask cluster that would time compiles side by side or has
            no worker for this backend (`cluster.admit`).
    """
    from tqdm import tqdm

    todo, skipped = plan(config)
    summary = SweepSummary(planned=len(todo), skipped=skipped)
    if not todo:
        return summary
    started = time.monotonic()
    deadline = started + 60 * config.budget_minutes if config.budget_minutes else math.inf
    shard = _shard_path(config)
    summary.shard = str(shard)
    queue = deque(todo)
    in_flight: dict = {}  # future -> the time limit its measurement was given
    pool = _pool(config)
    try:
        with ShardWriter(shard) as writer, tqdm(
                total=len(todo), disable=not config.progress, unit="prog",
                desc=f"sweep {config.backend}{'/' + config.target if config.target else ''}") as bar:
            while queue or in_flight:
                while queue and len(in_flight) < pool.slots():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        summary.stopped_by_budget = True
                        queue.clear()
                        break
                    family, params = queue.popleft()
                    timeout = min(config.timeout, left)
                    measure = (measure_program if config.trace_phases
                               else functools.partial(measure_program, trace_phases=False))
                    future = pool.submit(measure, family, params, config.backend,
                                         config.target, timeout, config.memory_limit,
                                         config.max_repeats, tuple(config.modules))
                    in_flight[future] = timeout
                if not in_flight:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    limit = in_flight.pop(future)
                    row = future.result()
                    if row["status"] == "timeout" and limit < config.timeout:
                        summary.cut_by_budget += 1
                        continue
                    writer.append(row)
                    summary.measured += 1
                    summary.statuses[row["status"]] += 1
                    bar.set_postfix_str(f"{row['family']} {row['status']} "
                                        f"{row.get('compile_seconds') or 0:.2f}s", refresh=False)
                    bar.update()
    finally:
        pool.close()
    summary.seconds = time.monotonic() - started
    return summary
