"""The service store's tables as SQLAlchemy Core sees them: the schema queries are written
against. Migrations (`migrations/versions/`) build and change the schema itself; a test
checks that the head revision and these tables agree.

Timestamps are ISO-8601 text in UTC, as the API reports them; JSON columns are text, so
SQLite and PostgreSQL store the same bytes and a row reads back the same on both.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

samples = sa.Table(
    "samples", metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("backend", sa.Text, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("program_sha256", sa.Text, nullable=False),
    sa.Column("features", sa.Text, nullable=False),
    sa.Column("compile_seconds", sa.Double, nullable=False),
    sa.Column("peak_rss_bytes", sa.Double),
    sa.Column("executable_memory_bytes", sa.Double),
    sa.Column("environment", sa.Text, nullable=False),
    # The address the sample came from (NULL before it was recorded): a retrain caps the
    # weight of any one source.
    sa.Column("client", sa.Text),
)

jobs = sa.Table(
    "jobs", metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("progress", sa.Double, nullable=False, server_default="0"),
    sa.Column("scope", sa.Text, nullable=False),
    sa.Column("results", sa.Text, nullable=False, server_default="[]"),
    sa.Column("error", sa.Text),
    # The process answerable for the job: the web worker that will run it in a thread, or
    # the retrain worker that claimed it; NULL while it waits for any retrain worker.
    sa.Column("host", sa.Text),
    sa.Column("pid", sa.Integer),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("finished_at", sa.Text),
    # Seconds since the epoch, written by that process while it lives.
    sa.Column("heartbeat_at", sa.Double),
)

promotions = sa.Table(
    "promotions", metadata,
    # Ids only grow (AUTOINCREMENT on SQLite): replicas read "promotions after the last id
    # I saw", so an id must never be reused.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("backend", sa.Text, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("job", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text, nullable=False),
    sqlite_autoincrement=True,
)
