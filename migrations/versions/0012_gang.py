"""Gangs: a job's node count, and one row per worker seat of a multi-node job's gang (its rank,
rank 0's rendezvous address and port, the seat's lease).

Revision ID: 0012_gang
Revises: 0011_step_progress
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_gang"
down_revision = "0011_step_progress"
branch_labels = None
depends_on = None
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("job", sa.Column("nodes", sa.Integer(), server_default="1", nullable=False))
    op.create_table(
        "gang_member",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("worker", sa.String(255), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("address", sa.String(255), nullable=True),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("joined_at", TS, nullable=False),
        sa.Column("lease_expires_at", TS, nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "worker", name="pk_gang_member"),
        sa.UniqueConstraint("job_id", "rank", name="uq_gang_member_job_rank"),
    )


def downgrade() -> None:
    op.drop_table("gang_member")
    # Plain DROP COLUMN (SQLite 3.35+): a batch copy of `job` would cascade-delete its rows.
    op.drop_column("job", "nodes")
