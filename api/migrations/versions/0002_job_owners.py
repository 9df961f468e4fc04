"""Jobs run by retrain workers: a queued job may have no owner yet, and owners heartbeat.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("host", existing_type=sa.Text, nullable=True)
        batch.alter_column("pid", existing_type=sa.Integer, nullable=True)
        batch.add_column(sa.Column("heartbeat_at", sa.Double))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("heartbeat_at")
        batch.alter_column("pid", existing_type=sa.Integer, nullable=False)
        batch.alter_column("host", existing_type=sa.Text, nullable=False)
