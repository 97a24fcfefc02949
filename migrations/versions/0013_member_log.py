"""A gang member's job log lines (ranks 1..N-1 keep theirs in their own homes and ship them
here, for GET /v1/jobs/{id}/logs?member=N).

Revision ID: 0013_member_log
Revises: 0012_gang
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_member_log"
down_revision = "0012_gang"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "member_log_line",
        sa.Column("id", sa.Integer(), autoincrement=True),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("member", sa.Integer(), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_member_log_line"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["job.id"], name="fk_member_log_line_job_id_job", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_member_log_line_job_member", "member_log_line", ["job_id", "member", "id"])


def downgrade() -> None:
    op.drop_table("member_log_line")
