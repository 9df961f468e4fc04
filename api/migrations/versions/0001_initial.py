"""The store as the service kept it before migrations: samples, jobs, promotions.

A SQLite file made by an earlier version already has these tables (created with CREATE
TABLE IF NOT EXISTS): they are adopted as they are, so upgrading keeps every row.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "samples" not in existing:
        op.create_table(
            "samples",
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
            sa.Column("environment", sa.Text, nullable=False))
    if "jobs" not in existing:
        op.create_table(
            "jobs",
            sa.Column("id", sa.Text, primary_key=True),
            sa.Column("status", sa.Text, nullable=False),
            sa.Column("progress", sa.Double, nullable=False, server_default="0"),
            sa.Column("scope", sa.Text, nullable=False),
            sa.Column("results", sa.Text, nullable=False, server_default="[]"),
            sa.Column("error", sa.Text),
            sa.Column("host", sa.Text, nullable=False),
            sa.Column("pid", sa.Integer, nullable=False),
            sa.Column("created_at", sa.Text, nullable=False),
            sa.Column("finished_at", sa.Text))
    if "promotions" not in existing:
        op.create_table(
            "promotions",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("backend", sa.Text, nullable=False),
            sa.Column("target", sa.Text, nullable=False),
            sa.Column("path", sa.Text, nullable=False),
            sa.Column("job", sa.Text, nullable=False),
            sa.Column("created_at", sa.Text, nullable=False),
            sqlite_autoincrement=True)


def downgrade() -> None:
    for table in ("promotions", "jobs", "samples"):
        op.drop_table(table)
