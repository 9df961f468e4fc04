"""Alembic's entry point for the service store: runs on the connection `Database` hands it.

`Database` opens that connection inside its exclusive transaction (BEGIN IMMEDIATE on
SQLite, an advisory lock on PostgreSQL), so two processes starting at once migrate one
after the other and every revision of one upgrade commits together.
"""

from __future__ import annotations

from alembic import context

from costmodel.api.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the store migrates itself when opened: costmodel.api.db.Database(url)")
# render_as_batch: SQLite changes a column by copying its table; Alembic's batch mode does.
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
