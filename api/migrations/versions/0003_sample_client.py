"""Samples record the client that sent them: a retrain caps what one source brings.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("samples") as batch:
        batch.add_column(sa.Column("client", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("samples") as batch:
        batch.drop_column("client")
