"""Each queued job's standing (position, reason, estimated start), stored when the scheduler
works it out, so reading a queued job looks it up.

Revision ID: 0019_queue_standing
Revises: 0018_batch_norm_momentum
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

TS = sa.DateTime(timezone=True)

revision = "0019_queue_standing"
down_revision = "0018_batch_norm_momentum"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_standing",
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("wait_reason", sa.Text(), nullable=False),
        sa.Column("estimated_start", TS, nullable=True),
        sa.Column("computed_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["job.id"], name="fk_queue_standing_job_id_job", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name="pk_queue_standing"),
    )


def downgrade() -> None:
    op.drop_table("queue_standing")
