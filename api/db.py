"""The service store: samples, retrain jobs and model promotions, in SQLite or PostgreSQL.

One SQLAlchemy engine per process, chosen by `DATABASE_URL`: by default a SQLite file
(embedded, nothing to set up), or a PostgreSQL server a team's replicas and retrain
workers share. Opening a store brings its schema to the newest Alembic revision.

SQLite keeps the durability it always had: WAL lets readers proceed while a writer
commits, `synchronous=FULL` makes a committed sample survive a power cut. PostgreSQL's
defaults (fsync on, synchronous commit) already do.
"""

from __future__ import annotations

import re
import sqlite3
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event

MIGRATIONS = Path(__file__).parent / "migrations"
_EXCLUSIVE = "costmodel_exclusive"
# One application-wide lock on PostgreSQL, for read-then-write sequences (one job at a
# time, claiming a job, migrating): what BEGIN IMMEDIATE is on SQLite.
_LOCK_KEY = zlib.crc32(b"costmodel.api.store")
# The ids the store hands out are lowercase hex (uuid4); anything else names no row.
_ID = re.compile(r"[0-9a-f]{1,64}")


def well_formed_id(value: str) -> bool:
    """Whether `value` can be an id the store made. Asked before any query: PostgreSQL
    refuses a NUL in a text parameter with an error, where SQLite just finds nothing."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def shown_id(value: str) -> str:
    """An id from a URL, quoted for an error message and cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Database:
    """An engine on the store at `url`, migrated to the newest schema on first use.

    Example:
        >>> db = Database("sqlite:////tmp/samples.sqlite3")
        >>> with db.connect() as conn:
        ...     conn.execute(sa.text("SELECT count(*) FROM samples")).scalar()
    """

    def __init__(self, url: str | sa.URL) -> None:
        self.url = sa.make_url(url)
        self.dialect = self.url.get_backend_name()
        if self.dialect == "sqlite":
            Path(self.url.database).parent.mkdir(parents=True, exist_ok=True)
            self.engine = sa.create_engine(self.url, connect_args={"timeout": 10.0})
            _sqlite_transactions(self.engine)
        else:
            # pre_ping: a replica outlives a server restart without failing a request.
            self.engine = sa.create_engine(self.url, pool_pre_ping=True, pool_size=2,
                                           max_overflow=8)
        self._upgrade()

    @contextmanager
    def connect(self, exclusive: bool = False) -> Iterator[sa.Connection]:
        """A connection in one transaction: committed on success, rolled back on error.

        `exclusive` serializes the transaction with every other exclusive one (all
        processes on the store), for read-then-write sequences.
        """
        with self.engine.connect() as conn:
            if exclusive:
                conn.execution_options(**{_EXCLUSIVE: True})
            with conn.begin():
                if exclusive and self.dialect == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"),
                                 {"key": _LOCK_KEY})
                yield conn

    def dispose(self) -> None:
        """Close the pooled connections (a server counts them; a test makes many stores)."""
        self.engine.dispose()

    def _upgrade(self) -> None:
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.connect(exclusive=True) as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "head")


def _sqlite_transactions(engine: sa.Engine) -> None:
    """Let the store, not the sqlite3 module, say where a transaction begins (the
    documented SQLAlchemy recipe), so a transaction can begin IMMEDIATE."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None
        mode = dbapi_connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            raise sqlite3.OperationalError(f"{engine.url.database} cannot use WAL (journal "
                                           f"mode {mode})")
        dbapi_connection.execute("PRAGMA synchronous=FULL")

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        exclusive = conn.get_execution_options().get(_EXCLUSIVE)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if exclusive else "BEGIN")
