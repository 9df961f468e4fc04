"""The rules a dask.distributed cluster must follow for a sweep's timings to be clean.

A compile's time is only a label if nothing else compiled on the same cores meanwhile.
dask runs as many tasks at once on a worker as it has threads, so the sweep submits each
measurement with the resource `compile: 1` and admits a worker only when that resource
caps it at one measurement at a time (`--resources compile=1`) or it has one thread.
GPU-backend measurements also ask for `gpu: 1`, so only workers that declare a GPU take
them (elsewhere a GPU program would compile deviceless, a different label), unless the
sweep asks for rows from any worker. The scheduler holds every task to its resources;
this module decides, from what the workers declare, which resources to ask for, and
refuses a cluster that would run compiles side by side; workers sharing a machine's
CPUs get a slice each (`split_cores`). `dask_pool.py` applies the rules.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

COMPILE = "compile"  # the resource one measurement holds while it runs
GPU = "gpu"          # declared by workers with a GPU; GPU-backend measurements need one

# How long a sweep waits for its first worker: batch systems queue worker jobs.
WAIT_FOR_WORKERS_SECONDS = 600.0
WORKER_HINT = (f"start each worker with one thread or with `--resources {COMPILE}=1` "
               f"(GPU machines `--resources \"{COMPILE}=1 {GPU}=1\"`)")


class ClusterRefused(RuntimeError):
    """The cluster cannot give this sweep clean timings (or has no worker for it)."""


class ConcurrentCompilesWarning(UserWarning):
    """A worker admitted with `allow_concurrent` runs more than one compile at a time."""


@dataclass(frozen=True)
class Worker:
    address: str
    nthreads: int
    resources: dict

    @property
    def compiles_at_once(self) -> int:
        """How many of the sweep's measurements dask would run on it at the same time."""
        declared = self.resources.get(COMPILE)
        return self.nthreads if declared is None else min(self.nthreads, int(declared))


@dataclass(frozen=True)
class Admission:
    """What to submit with: the resources each task asks for and the compiles in flight."""

    resources: dict
    slots: int
    workers: tuple[str, ...]


def admit(workers: list[Worker], needs_gpu: bool, allow_concurrent: bool = False) -> Admission:
    """Check the cluster against the rules; raise `ClusterRefused` when it breaks them.

    With `allow_concurrent`, workers that would run several compiles at once are used
    anyway, with a `ConcurrentCompilesWarning` naming them.

    Example:
        >>> admit([Worker("tcp://a:1", 4, {"compile": 1})], needs_gpu=False).resources
        {'compile': 1}
    """
    eligible = [w for w in workers if not needs_gpu or w.resources.get(GPU, 0) >= 1]
    if not eligible and needs_gpu:
        raise ClusterRefused(f"none of the {len(workers)} dask workers declares the `{GPU}` "
                             f"resource; GPU-backend measurements run only on workers "
                             f"started with `--resources \"{COMPILE}=1 {GPU}=1\"` (or pass "
                             f"--any-worker to compile deviceless on CPU workers)")
    if not eligible:
        raise ClusterRefused(f"no dask worker is connected; {WORKER_HINT}")
    concurrent = [w for w in eligible if w.compiles_at_once > 1]
    if concurrent:
        names = ", ".join(f"{w.address} ({w.compiles_at_once} at once)" for w in concurrent)
        if not allow_concurrent:
            raise ClusterRefused(f"dask workers would measure several compiles at once, "
                                 f"which inflates every timing: {names}; {WORKER_HINT} "
                                 f"(or pass --allow-concurrent to measure anyway)")
        warnings.warn(f"measuring with concurrent compiles on {names}: their rows' times "
                      f"are inflated", ConcurrentCompilesWarning, stacklevel=2)
    resources = {GPU: 1} if needs_gpu else {}
    # Ask for `compile` as soon as one worker declares it: it is what holds a worker with
    # many threads to one measurement. One-thread workers that do not declare it then
    # get no work, so a mixed cluster is told which ones sit idle.
    guarded = [w for w in eligible if w.resources.get(COMPILE, 0) >= 1]
    if guarded:
        resources[COMPILE] = 1
        idle = [w.address for w in eligible if w not in guarded]
        if idle:
            warnings.warn(f"dask workers without the `{COMPILE}` resource get no "
                          f"measurements: {', '.join(idle)}", stacklevel=2)
        eligible = guarded
    return Admission(resources, sum(w.compiles_at_once for w in eligible),
                     tuple(w.address for w in eligible))



def split_cores(places: dict[str, tuple[str, tuple[int, ...]]],
                allow_concurrent: bool = False) -> dict[str, tuple[int, ...]]:
    """CPUs of their own for workers that share a machine's: {address: cpus}.

    `places` maps each worker to (host, the CPUs it may run on). Workers with the same
    host and CPUs (a LocalCluster, several worker processes in one batch job) would
    compile on the same cores, so each gets an equal slice; a worker alone on its CPUs
    keeps them all and is left out of the answer. More workers than CPUs cannot be
    split: `ClusterRefused`, or with `allow_concurrent` a warning and no split.

    Example:
        >>> split_cores({"a": ("h", (0, 1)), "b": ("h", (0, 1)), "c": ("g", (0, 1))})
        {'a': (0,), 'b': (1,)}
    """
    groups: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for address, place in sorted(places.items()):
        groups.setdefault(place, []).append(address)
    cores = {}
    for (host, cpus), addresses in groups.items():
        n = len(addresses)
        if n == 1 or not cpus:  # alone, or a platform that does not say (no affinity)
            continue
        if len(cpus) < n:
            message = (f"{n} dask workers on {host} share {len(cpus)} CPUs, so their "
                       f"compiles contend: {', '.join(addresses)}")
            if not allow_concurrent:
                raise ClusterRefused(f"{message}; run at most one worker per CPU there "
                                     f"(or pass --allow-concurrent to measure anyway)")
            warnings.warn(message, ConcurrentCompilesWarning, stacklevel=2)
            continue
        for i, address in enumerate(addresses):
            cores[address] = cpus[i * len(cpus) // n:(i + 1) * len(cpus) // n]
    return cores
