"""The service stores the API tests run on: SQLite (the default) and real PostgreSQL.

`conftest.py` turns these into fixtures; a PostgreSQL store is a fresh schema on one
server per session, so each test starts empty, as it does with its own SQLite file.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pg_server
import pytest

KINDS = ("sqlite", "postgresql")
# As fixture parameters: PostgreSQL starts a server, so its runs are in the slow stage.
PARAMS = ("sqlite", pytest.param("postgresql", marks=pytest.mark.slow))
URL_ENV = "COSTMODEL_DATABASE_URL"
# CI sets this: a PostgreSQL test that cannot run is then a failure, never a skip.
REQUIRE_ENV = "COSTMODEL_REQUIRE_POSTGRES"


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{REQUIRE_ENV} is set but {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def postgres_server() -> Iterator[str]:
    """The URL of COSTMODEL_TEST_POSTGRES_URL's server, or of a throwaway one started here."""
    if importlib.util.find_spec("psycopg") is None:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    given = os.environ.get("COSTMODEL_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    if pg_server.bin_dir() is None:
        _unavailable("PostgreSQL is not installed and COSTMODEL_TEST_POSTGRES_URL is unset")
    # Not under pytest's 0700 tmp folders: as root, the server runs as another user.
    folder = Path(tempfile.gettempdir()) / f"costmodel-pg-{uuid.uuid4().hex[:8]}"
    url = pg_server.start(folder)
    try:
        yield url
    finally:
        pg_server.stop(folder)


@contextmanager
def fresh_postgres(server_url: str) -> Iterator[str]:
    """A URL whose connections see only a new, empty schema; dropped afterwards."""
    import sqlalchemy as sa

    schema = f"test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT",
                             poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        with _closing_stores():
            yield sa.make_url(server_url).update_query_dict(
                {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@contextmanager
def _closing_stores() -> Iterator[None]:
    """Close every store opened inside: a finished app's pooled connections, left to the
    garbage collector, would each raise psycopg's ResourceWarning (an error here)."""
    from costmodel.api import db

    opened = []
    original = db.Database.__init__

    def recording_init(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        opened.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(db.Database, "__init__", recording_init)
        try:
            yield
        finally:
            for database in opened:
                database.dispose()
