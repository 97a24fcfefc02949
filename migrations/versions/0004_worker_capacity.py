"""Worker capacity: the host memory and free artifacts disk each worker reports in its heartbeat.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.add_column(sa.Column("memory_bytes", sa.BigInteger()))
        batch.add_column(sa.Column("disk_free_bytes", sa.BigInteger()))


def downgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.drop_column("disk_free_bytes")
        batch.drop_column("memory_bytes")
