"""Each epoch's row gains data_wait_seconds: how long a streamed epoch waited for its input
(the largest over ranks; null for data held in memory); the per-framework epoch totals that
/metrics reads gain its sum.

Revision ID: 0022_epoch_data_wait
Revises: 0021_dataset_ingest
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_epoch_data_wait"
down_revision = "0021_dataset_ingest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("epoch_metric", sa.Column("data_wait_seconds", sa.Float(), nullable=True))
    op.add_column(
        "epoch_stat",
        sa.Column("data_wait_sum", sa.Float(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    op.drop_column("epoch_stat", "data_wait_sum")
    op.drop_column("epoch_metric", "data_wait_seconds")
