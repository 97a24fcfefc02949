"""A job's latest checkpoint in the database: the name of the newest checkpoint set whose
manifest is in the store, moved by the attempt that wrote it only once the manifest is there.

Revision ID: 0024_job_latest_checkpoint
Revises: 0023_epoch_data_reads
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_job_latest_checkpoint"
down_revision = "0023_epoch_data_reads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job", sa.Column("latest_checkpoint", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("job", "latest_checkpoint")
