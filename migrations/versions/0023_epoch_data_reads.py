"""Each epoch's row gains what a streamed epoch read: data_read_bytes (bytes read from the
store) and its shard cache's hits and misses, summed over ranks (null for data held in
memory); the per-framework epoch totals that /metrics reads gain their sums.

Revision ID: 0023_epoch_data_reads
Revises: 0022_epoch_data_wait
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_epoch_data_reads"
down_revision = "0022_epoch_data_wait"
branch_labels = None
depends_on = None

MEASURES = ("data_read_bytes", "data_cache_hits", "data_cache_misses")


def upgrade() -> None:
    for name in MEASURES:
        op.add_column("epoch_metric", sa.Column(name, sa.Float(), nullable=True))
        op.add_column(
            "epoch_stat",
            sa.Column(f"{name}_sum", sa.Float(), nullable=False, server_default=sa.text("0")),
        )


def downgrade() -> None:
    for name in reversed(MEASURES):
        op.drop_column("epoch_stat", f"{name}_sum")
        op.drop_column("epoch_metric", name)
