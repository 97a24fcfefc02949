"""A job's admitted peak-memory estimate: the claim takes it only on a worker with that much
memory, and its training process runs under a limit set from it.

Revision ID: 0017_job_memory_estimate
Revises: 0016_sweep_error
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_job_memory_estimate"
down_revision = "0016_sweep_error"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job", sa.Column("memory_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("job", "memory_bytes")
