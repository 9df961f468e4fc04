"""Measurements on a dask.distributed cluster, held to `cluster.py`'s rules.

The pool asks the scheduler what the workers declare and where they run whenever the
set of workers changes, admits them (or refuses the cluster), and submits each
measurement with the resources that keep it alone on its worker, together with the CPUs
of its own that workers sharing a machine were given.
"""

from __future__ import annotations

import os
import socket

from .cluster import WAIT_FOR_WORKERS_SECONDS, WORKER_HINT, ClusterRefused, Worker, admit, split_cores


def where_worker_runs() -> tuple[str, tuple[int, ...]]:
    """(host, CPUs this process may run on); run on each worker by `Client.run`."""
    try:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux: no affinity to read or split
        cpus = ()
    return socket.gethostname(), cpus


def measure_on_worker(cores: dict[str, tuple[int, ...]], measure, *args) -> dict:
    """Runs on the worker dask chose: `measure(*args, cpus=...)` with that worker's CPUs."""
    from distributed import get_worker

    return measure(*args, cpus=cores.get(get_worker().address))


def workers_of(client) -> list[Worker]:
    """The workers a connected `distributed.Client` sees now."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    return [Worker(address, int(w["nthreads"]), dict(w.get("resources") or {}))
            for address, w in sorted(info.items())]


class DaskPool:
    """Slots and submission for a sweep on the cluster at `address`.

    Example:
        >>> pool = DaskPool("tcp://scheduler:8786", needs_gpu=False)  # doctest: +SKIP
        >>> future = pool.submit(measure_program, *args)              # doctest: +SKIP
    """

    def __init__(self, address: str, needs_gpu: bool, allow_concurrent: bool = False,
                 wait_seconds: float = WAIT_FOR_WORKERS_SECONDS) -> None:
        from distributed import Client

        self.client = Client(address)
        self.needs_gpu, self.allow_concurrent = needs_gpu, allow_concurrent
        self._seen: list[Worker] | None = None
        self._executor = None
        self._slots = 0
        self.cores: dict[str, tuple[int, ...]] = {}
        try:
            try:  # a batch system may start workers minutes after the scheduler
                self.client.wait_for_workers(1, timeout=wait_seconds)
            except TimeoutError:
                raise ClusterRefused(f"no dask worker joined {address} within "
                                     f"{wait_seconds:.0f} s; {WORKER_HINT}") from None
            self.slots()
        except BaseException:
            self.client.close()
            raise

    def slots(self) -> int:
        """Measurements that may be in flight now (one per admitted worker)."""
        workers = workers_of(self.client)
        if workers != self._seen:
            admission = admit(workers, self.needs_gpu, self.allow_concurrent)
            places = self.client.run(where_worker_runs, workers=list(admission.workers))
            self.cores = split_cores(places, self.allow_concurrent)
            self._executor = self.client.get_executor(resources=admission.resources,
                                                      pure=False)
            self._slots, self._seen = admission.slots, workers
        return self._slots

    def submit(self, measure, *args):
        """A `concurrent.futures.Future` of `measure(*args, cpus=...)` on an admitted worker."""
        return self._executor.submit(measure_on_worker, self.cores, measure, *args)

    def close(self) -> None:
        self.client.close()
