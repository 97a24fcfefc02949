"""Jobs, their transitions, per-epoch metrics and live workers.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "job",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("framework", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_restarts", sa.Integer(), nullable=False),
        sa.Column("current_epoch", sa.Integer(), nullable=False),
        sa.Column("best_epoch", sa.Integer()),
        sa.Column("best_metric", sa.Float()),
        sa.Column("stop_reason", sa.String(32)),
        sa.Column("error_code", sa.String(32)),
        sa.Column("error", sa.Text()),
        sa.Column("result", sa.JSON()),
        sa.Column("worker_name", sa.String(255)),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("dispatched_at", TS),
        sa.Column("started_at", TS),
        sa.Column("finished_at", TS),
        sa.Column("lease_expires_at", TS),
        sa.Column("cancel_requested_at", TS),
        sa.PrimaryKeyConstraint("id", name="pk_job"),
    )
    op.create_index("ix_job_created", "job", ["created_at", "id"])
    op.create_index("ix_job_status_created", "job", ["status", "created_at"])
    op.create_table(
        "job_transition",
        sa.Column("id", sa.Integer(), autoincrement=True),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("from_status", sa.String(16)),
        sa.Column("to_status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_transition"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["job.id"], name="fk_job_transition_job_id_job", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_job_transition_job_id", "job_transition", ["job_id"])
    op.create_table(
        "epoch_metric",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        *[
            sa.Column(name, sa.Float())
            for name in (
                "train_loss",
                "train_accuracy",
                "train_mae",
                "val_loss",
                "val_accuracy",
                "val_mae",
                "learning_rate",
                "epoch_seconds",
                "samples_per_second",
            )
        ],
        sa.Column("recorded_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "epoch", name="pk_epoch_metric"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["job.id"], name="fk_epoch_metric_job_id_job", ondelete="CASCADE"
        ),
    )
    op.create_table(
        "worker",
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("heartbeat_at", TS, nullable=False),
        sa.Column("current_job_id", sa.String(36)),
        sa.PrimaryKeyConstraint("name", name="pk_worker"),
    )


def downgrade() -> None:
    op.drop_table("worker")
    op.drop_table("epoch_metric")
    op.drop_index("ix_job_transition_job_id", table_name="job_transition")
    op.drop_table("job_transition")
    op.drop_index("ix_job_status_created", table_name="job")
    op.drop_index("ix_job_created", table_name="job")
    op.drop_table("job")
