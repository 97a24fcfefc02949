"""The scheduler: a job's priority and preemptibility, a key's share weight and priority cap,
one row per attempt's time on a worker (fair share by recent GPU-seconds per key), and the
scheduler's running totals for /metrics (queue waits, preemptions).

Revision ID: 0010_scheduler
Revises: 0007_hostile
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_scheduler"
down_revision = "0007_hostile"
branch_labels = None
depends_on = None
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("job", sa.Column("priority", sa.Integer(), server_default="50", nullable=False))
    op.add_column(
        "job", sa.Column("preemptible", sa.Boolean(), server_default=sa.true(), nullable=False)
    )
    op.add_column("job", sa.Column("preempted_by", sa.String(36), nullable=True))
    op.create_index("ix_job_queue", "job", ["status", "priority", "owner_id", "created_at"])
    op.add_column(
        "api_key", sa.Column("share_weight", sa.Float(), server_default="1.0", nullable=False)
    )
    op.add_column("api_key", sa.Column("max_priority", sa.Integer(), nullable=True))
    op.create_table(
        "job_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("owner_id", sa.String(16), nullable=True),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("started", sa.Float(), nullable=False),
        sa.Column("ended", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_job_run"),
    )
    op.create_index("ix_job_run_owner_ended", "job_run", ["owner_id", "ended"])
    op.create_index("ix_job_run_job_ended", "job_run", ["job_id", "ended"])
    op.create_table(
        "scheduler_stat",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("bucket", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("seconds_sum", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", "bucket", name="pk_scheduler_stat"),
    )


def downgrade() -> None:
    op.drop_table("scheduler_stat")
    op.drop_index("ix_job_run_job_ended", "job_run")
    op.drop_index("ix_job_run_owner_ended", "job_run")
    op.drop_table("job_run")
    # Plain DROP COLUMN (SQLite 3.35+): a batch copy of `job` would cascade-delete its rows.
    op.drop_column("api_key", "max_priority")
    op.drop_column("api_key", "share_weight")
    op.drop_index("ix_job_queue", "job")
    for column in ("preempted_by", "preemptible", "priority"):
        op.drop_column("job", column)
