"""`costmodel retrain-worker`: a process that runs the store's queued retrain jobs.

With `RETRAIN_RUNNER="worker"` the web workers only enqueue jobs; one or more of these
processes, on any host that reaches the store and RETRAIN_DIR, claim them one at a time
(`JobStore.claim` is exclusive across every process on the store). A worker builds the
same state a web worker does, so it compares candidates with the models being served,
and its promotions reach the replicas the way any promotion does (`ModelRegistry.sync`).

SIGTERM or Ctrl-C marks the running job failed and exits. `kill -9` leaves it running in
the store until the next process to claim or create a job sees its pid gone (same host)
or its heartbeat RETRAIN_STALE_SECONDS old, and marks it failed; starting it again is a
new `POST /v1/retrain`.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Mapping
from typing import Any

from .config import load_config
from .retrain_job import run_claimed
from .state import build_state

log = logging.getLogger("costmodel.api")


def _stop(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def run_worker(config: Mapping[str, Any] | None = None, poll_seconds: float = 1.0,
               once: bool = False) -> int:
    """Run queued jobs until stopped; with `once`, until none is queued. Jobs run, returned.

    Example:
        >>> run_worker({"DATABASE_URL": "postgresql://cm@db/cm", "RETRAIN_DIR": "/models"})
    """
    if not poll_seconds > 0:
        raise ValueError(f"poll_seconds must be > 0, not {poll_seconds}")
    state = build_state(load_config(config))
    log.info("retrain worker ready on %s", state.jobs.db.url.render_as_string(hide_password=True))
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        return _loop(state, poll_seconds, once)
    finally:
        signal.signal(signal.SIGTERM, previous)
        state.jobs.db.dispose()


def _loop(state, poll_seconds: float, once: bool) -> int:
    ran = 0
    while True:
        claimed = state.jobs.claim()
        if claimed is None:
            if once:
                return ran
            time.sleep(poll_seconds)
            continue
        log.info("running retrain job %s", claimed["id"])
        run_claimed(state, claimed)
        ran += 1
        log.info("retrain job %s: %s", claimed["id"], state.jobs.get(claimed["id"])["status"])
