"""Why a sweep failed by itself (a round that could not top it up, too many failed trials),
shown with the sweep.

Revision ID: 0016_sweep_error
Revises: 0015_dataset_size_bigint
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_sweep_error"
down_revision = "0015_dataset_size_bigint"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sweep", sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("sweep", "error")
