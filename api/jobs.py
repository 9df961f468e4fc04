"""Retrain job records and model promotions, kept in the service database.

Jobs live in SQLite rather than in memory because gunicorn runs several worker
processes: the worker that started a job and the one asked for its status may differ.
"""

from __future__ import annotations

import json
import math
import os
import socket
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from werkzeug.exceptions import Conflict

from .db import Database

STATUSES = ("queued", "running", "succeeded", "failed", "rejected")
ACTIVE = ("queued", "running")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobStore:
    """Creates, updates and reads retrain jobs; records which artifact each promotion put live.

    Example:
        >>> job_id = JobStore(db).create({"backend": None, "target": None})
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self.host = socket.gethostname()

    def create(self, scope: dict[str, Any]) -> str:
        """A new queued job; 409 Conflict while another job is queued or running."""
        job_id = uuid.uuid4().hex[:16]
        with self.db.connect(immediate=True) as conn:
            self._fail_orphans(conn)
            active = conn.execute("SELECT id FROM jobs WHERE status IN (?, ?)", ACTIVE).fetchone()
            if active is not None:
                raise Conflict(f"retrain job {active['id']} is still running; one job at a time")
            conn.execute(
                "INSERT INTO jobs (id, status, progress, scope, host, pid, created_at)"
                " VALUES (?, 'queued', 0, ?, ?, ?, ?)",
                (job_id, json.dumps(scope), self.host, os.getpid(), _now()))
        return job_id

    def _fail_orphans(self, conn) -> None:
        # A job whose worker process has exited will never finish: say so instead of
        # blocking every later job.
        for row in conn.execute("SELECT id, host, pid FROM jobs WHERE status IN (?, ?)",
                                ACTIVE).fetchall():
            if row["host"] == self.host and not _alive(row["pid"]):
                conn.execute("UPDATE jobs SET status = 'failed', error = ?, finished_at = ?"
                             " WHERE id = ?",
                             ("interrupted: the worker running it exited", _now(), row["id"]))

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
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self.db.connect() as conn:
            conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*fields.values(), job_id))

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The job as the API reports it, or None."""
        with self.db.connect() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        results = json.loads(row["results"])
        return {
            "job": row["id"],
            "status": row["status"],
            "progress": row["progress"],
            "scope": json.loads(row["scope"]),
            "swapped": any(r.get("swapped") for r in results),
            # "current": the score the candidate had to beat (see training.promotion)
            "scores": {_label(r): {"new": _finite(r.get("score_new")),
                                   "current": _finite(r.get("score_to_beat"))} for r in results},
            "results": results,
            "error": row["error"],
            "created_at": row["created_at"],
            "finished_at": row["finished_at"],
        }

    def promote(self, backend: str, target: str, path: Path, job_id: str) -> int:
        """Record that the artifact at `path` is now live for (backend, target); its id."""
        with self.db.connect() as conn:
            cursor = conn.execute(
                "INSERT INTO promotions (backend, target, path, job, created_at)"
                " VALUES (?, ?, ?, ?, ?)", (backend, target, str(path), job_id, _now()))
            return int(cursor.lastrowid)

    def latest_promotion_id(self) -> int:
        with self.db.connect() as conn:
            return int(conn.execute("SELECT coalesce(max(id), 0) FROM promotions").fetchone()[0])

    def promotions_after(self, promotion_id: int) -> list[dict[str, Any]]:
        """The newest promotion per (backend, target) with an id above `promotion_id`."""
        with self.db.connect() as conn:
            rows = conn.execute(
                "SELECT p.* FROM promotions p JOIN (SELECT backend, target, max(id) AS id"
                " FROM promotions GROUP BY backend, target) latest ON p.id = latest.id"
                " WHERE p.id > ? ORDER BY p.id", (promotion_id,)).fetchall()
        return [dict(row) for row in rows]


def _label(result: dict[str, Any]) -> str:
    return result["backend"] + (f"/{result['target']}" if result.get("target") else "")


def _finite(value: Any) -> float | None:
    if value is None or not math.isfinite(float(value)):
        return None
    return float(value)
