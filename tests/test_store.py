"""The service store itself: migrations, SQLite's durability settings, one job at a time
and one claim per job across processes' engines, heartbeats. On SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import stores
from werkzeug.exceptions import Conflict

from costmodel.api.config import load_config
from costmodel.api.db import Database
from costmodel.api.jobs import JobLost, JobStore
from costmodel.api.tables import jobs, metadata

SCOPE = {"backend": None, "target": None}


@pytest.fixture
def url(tmp_path, store):
    return load_config({"SAMPLES_DB": tmp_path / "store.sqlite3",
                        "RETRAIN_DIR": tmp_path / "models"})["DATABASE_URL"]


def _columns(db: Database) -> dict[str, dict[str, bool]]:
    inspector = sa.inspect(db.engine)
    return {table: {c["name"]: c["nullable"] for c in inspector.get_columns(table)}
            for table in metadata.tables}


def test_the_newest_migration_builds_the_tables_the_queries_use(url):
    db = Database(url)
    assert _columns(db) == {name: {c.name: c.nullable for c in table.columns}
                            for name, table in metadata.tables.items()}
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).all() == [
            ("0003",)]
    Database(url)  # opening again migrates nothing and fails nothing


# The store as the service created it before migrations (its CREATE TABLE IF NOT EXISTS).
OLD_SCHEMA = """
CREATE TABLE samples (id TEXT PRIMARY KEY, created_at TEXT NOT NULL, backend TEXT NOT NULL,
    target TEXT NOT NULL, schema_version INTEGER NOT NULL, source TEXT NOT NULL,
    program_sha256 TEXT NOT NULL, features TEXT NOT NULL, compile_seconds REAL NOT NULL,
    peak_rss_bytes REAL, executable_memory_bytes REAL, environment TEXT NOT NULL);
CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL, progress REAL NOT NULL DEFAULT 0,
    scope TEXT NOT NULL, results TEXT NOT NULL DEFAULT '[]', error TEXT, host TEXT NOT NULL,
    pid INTEGER NOT NULL, created_at TEXT NOT NULL, finished_at TEXT);
CREATE TABLE promotions (id INTEGER PRIMARY KEY AUTOINCREMENT, backend TEXT NOT NULL,
    target TEXT NOT NULL, path TEXT NOT NULL, job TEXT NOT NULL, created_at TEXT NOT NULL);
INSERT INTO jobs VALUES ('01d0', 'succeeded', 1, '{}', '[]', NULL, 'h', 1, 't0', 't1');
INSERT INTO promotions (backend, target, path, job, created_at) VALUES ('cpu', '', '/m', '01d0', 't1');
"""


def test_a_sqlite_store_from_before_migrations_is_adopted_with_its_rows(tmp_path):
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SCHEMA)
    db = Database(f"sqlite:///{path}")
    assert _columns(db)["jobs"]["pid"] is True and "heartbeat_at" in _columns(db)["jobs"]
    store = JobStore(db)
    assert store.get("01d0")["status"] == "succeeded"
    assert store.promotions_after(0)[0]["path"] == "/m"
    # the adopted table takes new jobs, and promotion ids go on from the old ones
    assert store.promote("cpu", "", tmp_path / "m2", store.create({}), []) == 2


def test_sqlite_keeps_wal_and_full_synchronous(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 's.sqlite3'}")
    with db.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL


def _race(n: int, action) -> list:
    """`action()` in `n` threads released together; what each returned or raised."""
    barrier = threading.Barrier(n)
    out: list = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = action(i)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return out


def test_one_job_at_a_time_and_one_claim_per_job_across_engines(url):
    # Separate engines, as separate processes have: the store alone serializes them.
    stores = [JobStore(Database(url)) for _ in range(4)]
    created = _race(4, lambda i: stores[i].create(SCOPE, owned=False))
    job_ids = [c for c in created if isinstance(c, str)]
    assert len(job_ids) == 1 and sum(isinstance(c, Conflict) for c in created) == 3
    claims = _race(4, lambda i: stores[i].claim())
    assert [c["id"] for c in claims if c is not None] == job_ids
    assert stores[0].get(job_ids[0])["status"] == "running"


def test_a_job_owned_by_this_process_is_not_taken_by_a_worker(url):
    store = JobStore(Database(url))
    job_id = store.create(SCOPE, owned=True)
    assert store.claim() is None
    assert store.claim(job_id)["id"] == job_id


def test_a_running_job_without_heartbeat_is_failed_wherever_it_ran(url):
    store = JobStore(Database(url), stale_seconds=30)
    job_id = store.create(SCOPE, owned=False)
    assert store.claim()["id"] == job_id
    with store.db.connect() as conn:  # claimed by a process on another host, 31 s silent
        conn.execute(jobs.update().values(host="elsewhere", pid=1,
                                          heartbeat_at=time.time() - 31))
    store.heartbeat(job_id)  # not ours: changes nothing
    assert store.claim() is None
    job = store.get(job_id)
    assert (job["status"], job["error"]) == (
        "failed", "interrupted: no heartbeat from its worker (elsewhere, pid 1) for 30 s")


def test_reading_a_job_whose_worker_went_silent_reports_it_failed(url):
    store = JobStore(Database(url), stale_seconds=30)
    job_id = store.create(SCOPE, owned=False)
    store.claim()
    with store.db.connect() as conn:
        conn.execute(jobs.update().values(host="elsewhere", pid=1,
                                          heartbeat_at=time.time() - 31))
    # No process claims or creates a job: the read alone finds the job orphaned, and
    # records it.
    expected = ("failed", "interrupted: no heartbeat from its worker (elsewhere, pid 1) for 30 s")
    job = store.get(job_id)
    assert (job["status"], job["error"]) == expected
    with store.db.connect() as conn:
        assert tuple(conn.execute(sa.select(jobs.c.status, jobs.c.error)).one()) == expected


def test_a_worker_whose_job_was_failed_as_orphaned_can_neither_finish_nor_promote(url):
    store = JobStore(Database(url), stale_seconds=30)
    job_id = store.create(SCOPE, owned=False)
    store.claim()
    with store.db.connect() as conn:  # this worker went silent past the limit...
        conn.execute(jobs.update().values(heartbeat_at=time.time() - 31))
    assert store.get(job_id)["status"] == "failed"
    # ...and wakes up: its outcome and its promotion are refused, nothing is recorded
    with pytest.raises(JobLost):
        store.update(job_id, status="succeeded", progress=1.0)
    with pytest.raises(JobLost):
        store.promote("cpu", "", Path("/m"), job_id, [{"swapped": True}])
    assert store.promotions_after(0) == []
    job = store.get(job_id)
    assert (job["status"], job["results"]) == ("failed", [])


def test_a_heartbeat_keeps_a_running_job(url):
    store = JobStore(Database(url), stale_seconds=30)
    job_id = store.create(SCOPE, owned=False)
    store.claim()
    with store.db.connect() as conn:
        conn.execute(jobs.update().values(heartbeat_at=time.time() - 31))
    store.heartbeat(job_id)
    with pytest.raises(Conflict):
        store.create(SCOPE)
    assert store.get(job_id)["status"] == "running"


def test_only_candidates_of_ended_jobs_that_no_promotion_names_are_abandoned(url, tmp_path):
    store = JobStore(Database(url))
    promoted = store.create(SCOPE)
    store.promote("cpu", "", tmp_path / f"cpu-{promoted}", promoted, [])
    store.update(promoted, status="succeeded")
    killed = store.create(SCOPE)
    store.update(killed, status="failed")
    running = store.create(SCOPE)
    candidates = [(job_id, tmp_path / f"{label}-{job_id}") for job_id in (promoted, killed)
                  for label in ("cpu", "gpu-h100")]
    candidates += [(running, tmp_path / f"cpu-{running}"), ("default", tmp_path / "default")]
    # what ended jobs left unpromoted; not the promoted one, the running job's or a model
    # someone keeps there
    assert store.abandoned(candidates) == [tmp_path / f"gpu-h100-{promoted}",
                                           tmp_path / f"cpu-{killed}",
                                           tmp_path / f"gpu-h100-{killed}"]


def test_the_database_url_is_validated_and_a_shared_store_needs_a_model_folder():
    assert str(load_config({"SAMPLES_DB": "/s/x.sqlite3"}, {})["DATABASE_URL"]) == (
        "sqlite:////s/x.sqlite3")
    pg = load_config({"DATABASE_URL": "postgresql://cm@db:5432/cm", "RETRAIN_DIR": "/m"}, {})
    assert pg["DATABASE_URL"].drivername == "postgresql+psycopg"
    environ = {"COSTMODEL_DATABASE_URL": "postgresql+psycopg://cm@db/cm",
               "COSTMODEL_RETRAIN_DIR": "/shared/models"}
    assert load_config({}, environ)["DATABASE_URL"].host == "db"
    with pytest.raises(ValueError, match="a shared store needs RETRAIN_DIR"):
        load_config({"DATABASE_URL": "postgresql://cm@db/cm"}, {})
    with pytest.raises(ValueError, match="must be sqlite:///FILE or postgresql://"):
        load_config({"DATABASE_URL": "mysql://cm@db/cm", "RETRAIN_DIR": "/m"}, {})
    with pytest.raises(ValueError, match="not a database URL"):
        load_config({"DATABASE_URL": "not a url"}, {})
    with pytest.raises(ValueError, match="RETRAIN_RUNNER must be one of"):
        load_config({"RETRAIN_RUNNER": "cron"}, {})


def test_ci_turns_a_missing_postgresql_into_a_failure(monkeypatch):
    monkeypatch.setenv(stores.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="COSTMODEL_REQUIRE_POSTGRES is set but no"):
        stores._unavailable("no server")
    monkeypatch.delenv(stores.REQUIRE_ENV)
    with pytest.raises(pytest.skip.Exception, match="no server"):
        stores._unavailable("no server")
