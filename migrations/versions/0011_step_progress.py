"""A job's step progress within the epoch in progress (what the training process last
reported), so clients see an epoch move before it ends.

Revision ID: 0011_step_progress
Revises: 0010_scheduler
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_step_progress"
down_revision = "0010_scheduler"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job", sa.Column("step_progress", sa.JSON(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite 3.35+): a batch copy of `job` would cascade-delete its rows.
    op.drop_column("job", "step_progress")
