"""The service's one SQLite file: samples, retrain jobs and model promotions.

Every worker process (and its retrain thread) opens short-lived connections, so the
file is the only state shared between gunicorn workers. WAL lets readers proceed while
a writer commits; `synchronous=FULL` makes a committed sample survive a power cut.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    backend TEXT NOT NULL,
    target TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    source TEXT NOT NULL,
    program_sha256 TEXT NOT NULL,
    features TEXT NOT NULL,
    compile_seconds REAL NOT NULL,
    peak_rss_bytes REAL,
    executable_memory_bytes REAL,
    environment TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    progress REAL NOT NULL DEFAULT 0,
    scope TEXT NOT NULL,
    results TEXT NOT NULL DEFAULT '[]',
    error TEXT,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE TABLE IF NOT EXISTS promotions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    backend TEXT NOT NULL,
    target TEXT NOT NULL,
    path TEXT NOT NULL,
    job TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


class Database:
    """Opens connections to one SQLite file, creating it and its tables on first use.

    Example:
        >>> db = Database(Path("/tmp/samples.sqlite3"))
        >>> with db.connect() as conn:
        ...     conn.execute("SELECT count(*) FROM samples").fetchone()
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            # WAL is a property of the file: set once here, every later connection uses it.
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise sqlite3.OperationalError(f"{self.path} cannot use WAL (journal mode {mode})")
            conn.executescript(SCHEMA)
        finally:
            conn.close()

    @contextmanager
    def connect(self, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection in one transaction: committed on success, rolled back on error.

        `immediate` takes the write lock up front, for read-then-write sequences.
        """
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()
