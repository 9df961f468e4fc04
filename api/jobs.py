"""Retrain job records and model promotions, kept in the service store.

Jobs live in the store rather than in memory because several processes share them:
gunicorn's workers, replicas on other hosts and retrain workers. The worker that
accepted a job, the one asked for its status and the process that runs it may differ.

A job is queued, then claimed by exactly one process (a web worker's thread, or a
`costmodel retrain-worker`), which heartbeats while it runs it. A job whose process
died (on this host: its pid is gone; anywhere: no heartbeat for RETRAIN_STALE_SECONDS)
is marked failed, so it blocks no later job and the caller can start it again: by the
next process to create or claim a job, or to read that job.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from werkzeug.exceptions import Conflict

from .db import Database, well_formed_id
from .tables import jobs, promotions

STATUSES = ("queued", "running", "succeeded", "failed", "rejected")
ACTIVE = ("queued", "running")
DIED = "interrupted: the worker running it exited"


def _now(timespec: str = "seconds") -> str:
    return datetime.now(timezone.utc).isoformat(timespec=timespec)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobLost(Exception):
    """This process no longer owns the job: it was failed as orphaned (a worker silent
    past the heartbeat limit) and must not write its outcome or promote."""


class JobStore:
    """Creates, claims, updates and reads retrain jobs; records which artifact each
    promotion put live.

    Example:
        >>> store = JobStore(db)
        >>> job_id = store.create({"backend": None, "target": None}, owned=False)
        >>> store.claim()["id"] == job_id
        True
    """

    def __init__(self, db: Database, stale_seconds: float = 60.0) -> None:
        self.db = db
        self.stale_seconds = float(stale_seconds)
        self.host = socket.gethostname()

    def create(self, scope: dict[str, Any], owned: bool = True) -> str:
        """A new queued job; 409 Conflict while another job is queued or running.

        `owned`: this process will run it (claim it by id); otherwise any retrain worker may.
        """
        job_id = uuid.uuid4().hex[:16]
        with self.db.connect(exclusive=True) as conn:
            self._fail_orphans(conn)
            active = conn.execute(sa.select(jobs.c.id).where(jobs.c.status.in_(ACTIVE))).first()
            if active is not None:
                raise Conflict(f"retrain job {active.id} is still running; one job at a time")
            owner = {"host": self.host, "pid": os.getpid(), "heartbeat_at": time.time()} \
                if owned else {}
            conn.execute(jobs.insert().values(id=job_id, status="queued", progress=0.0,
                                              scope=json.dumps(scope), created_at=_now(),
                                              **owner))
        return job_id

    def claim(self, job_id: str | None = None) -> dict[str, Any] | None:
        """Take a queued job for this process: `job_id`, or else the oldest one no process
        owns. Returns `{"id", "scope"}`, or None when there is none to take."""
        with self.db.connect(exclusive=True) as conn:
            self._fail_orphans(conn)
            query = sa.select(jobs.c.id, jobs.c.scope).where(jobs.c.status == "queued")
            query = query.where(jobs.c.id == job_id) if job_id is not None else query.where(
                jobs.c.pid.is_(None)).order_by(jobs.c.created_at, jobs.c.id).limit(1)
            row = conn.execute(query).first()
            if row is None:
                return None
            conn.execute(jobs.update().where(jobs.c.id == row.id).values(
                status="running", host=self.host, pid=os.getpid(), heartbeat_at=time.time()))
        return {"id": row.id, "scope": json.loads(row.scope)}

    def heartbeat(self, job_id: str) -> None:
        """Say this process still runs `job_id`."""
        with self.db.connect() as conn:
            conn.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.pid == os.getpid())
                         .values(heartbeat_at=time.time()))

    def _orphaned(self, row) -> str | None:
        """Why the active job `row` will never finish (its process is gone), or None.
        Jobs nobody owns yet (no pid) wait for a retrain worker."""
        if row.pid is None:
            return None
        if row.host == self.host and not _alive(row.pid):
            return DIED
        if row.heartbeat_at is not None and row.heartbeat_at < time.time() - self.stale_seconds:
            return (f"interrupted: no heartbeat from its worker ({row.host}, pid {row.pid}) "
                    f"for {self.stale_seconds:g} s")
        return None

    def _fail_orphans(self, conn: sa.Connection, job_id: str | None = None) -> None:
        # A job whose process has exited will never finish: say so instead of blocking
        # every later job (or, with `job_id`, instead of reporting that job running).
        query = sa.select(jobs.c.id, jobs.c.host, jobs.c.pid, jobs.c.heartbeat_at).where(
            jobs.c.status.in_(ACTIVE), jobs.c.pid.is_not(None))
        if job_id is not None:
            query = query.where(jobs.c.id == job_id)
        for row in conn.execute(query).all():
            error = self._orphaned(row)
            if error is not None:
                # still active: a job that ended meanwhile keeps its outcome
                conn.execute(jobs.update().where(jobs.c.id == row.id,
                                                 jobs.c.status.in_(ACTIVE)).values(
                    status="failed", error=error, finished_at=_now()))

    def update(self, job_id: str, *, status: str | None = None, progress: float | None = None,
               results: list[dict] | None = None, error: str | None = None) -> None:
        assert status is None or status in STATUSES, status
        fields: dict[str, Any] = {}
        if status is not None:
            fields["status"] = status
            if status not in ACTIVE:
                fields["finished_at"] = _now()
        if progress is not None:
            fields["progress"] = progress
        if results is not None:
            fields["results"] = json.dumps(results)
        if error is not None:
            fields["error"] = error
        with self.db.connect() as conn:
            if not conn.execute(self._owned(job_id).values(**fields)).rowcount:
                raise JobLost(job_id)

    def _owned(self, job_id: str):
        """An update of `job_id` that applies only while this process runs it."""
        return jobs.update().where(jobs.c.id == job_id, jobs.c.status.in_(ACTIVE),
                                   jobs.c.host == self.host, jobs.c.pid == os.getpid())

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The job as the API reports it, or None. A job whose process is gone is failed
        here and reported so, though no worker is left to claim jobs and notice."""
        if not well_formed_id(job_id):
            return None
        query = sa.select(jobs).where(jobs.c.id == job_id)
        with self.db.connect() as conn:
            row = conn.execute(query).first()
        if row is not None and row.status in ACTIVE and self._orphaned(row) is not None:
            with self.db.connect(exclusive=True) as conn:  # checked again under the lock
                self._fail_orphans(conn, job_id)
                row = conn.execute(query).first()
        if row is None:
            return None
        results = json.loads(row.results)
        return {
            "job": row.id,
            "status": row.status,
            "progress": row.progress,
            "scope": json.loads(row.scope),
            "swapped": any(r.get("swapped") for r in results),
            # "current": the score the candidate had to beat (see training.promotion)
            "scores": {_label(r): {"new": _finite(r.get("score_new")),
                                   "current": _finite(r.get("score_to_beat"))} for r in results},
            "results": results,
            "error": row.error,
            "created_at": row.created_at,
            "finished_at": row.finished_at,
        }

    def promote(self, backend: str, target: str, path: Path, job_id: str,
                results: list[dict]) -> int:
        """Record that the artifact at `path` is now live for (backend, target), and the
        job's results that say so, in one transaction; the promotion's id."""
        with self.db.connect() as conn:
            if self.db.dialect == "postgresql":
                # Ids come from a sequence, handed out before commit: without the lock a
                # later id could commit first and a replica that saw it skip this one.
                conn.execute(sa.text("LOCK TABLE promotions IN EXCLUSIVE MODE"))
            if not conn.execute(self._owned(job_id).values(
                    results=json.dumps(results))).rowcount:
                raise JobLost(job_id)  # rolls back: nothing promoted
            promotion_id = conn.execute(promotions.insert().values(
                backend=backend, target=target, path=str(path), job=job_id,
                created_at=_now("microseconds"))).inserted_primary_key[0]
        return int(promotion_id)

    def abandoned(self, artifacts: list[tuple[str, Path]]) -> list[Path]:
        """Of `artifacts` ((job id, path) pairs), those whose job has ended without
        recording their promotion: nothing will ever serve them."""
        job_ids = {job_id for job_id, _ in artifacts}
        with self.db.connect() as conn:
            ended = set(conn.execute(sa.select(jobs.c.id).where(
                jobs.c.id.in_(job_ids), jobs.c.status.not_in(ACTIVE))).scalars())
            promoted = {Path(path).name for path in conn.execute(
                sa.select(promotions.c.path).where(promotions.c.job.in_(job_ids))).scalars()}
        return [path for job_id, path in artifacts
                if job_id in ended and path.name not in promoted]

    def latest_promotion_id(self) -> int:
        with self.db.connect() as conn:
            return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(promotions.c.id), 0)))
                       .scalar())

    def promotions_after(self, promotion_id: int) -> list[dict[str, Any]]:
        """The newest promotion per (backend, target) with an id above `promotion_id`."""
        latest = (sa.select(sa.func.max(promotions.c.id).label("id"))
                  .group_by(promotions.c.backend, promotions.c.target).subquery())
        query = (sa.select(promotions).join(latest, promotions.c.id == latest.c.id)
                 .where(promotions.c.id > promotion_id).order_by(promotions.c.id))
        with self.db.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]


def _label(result: dict[str, Any]) -> str:
    return result["backend"] + (f"/{result['target']}" if result.get("target") else "")


def _finite(value: Any) -> float | None:
    if value is None or not math.isfinite(float(value)):
        return None
    return float(value)
