"""A data set's size_bytes is 64-bit: a stored upload may pass 2^31 bytes (an int4 refused the
row after its file was written).

Revision ID: 0015_dataset_size_bigint
Revises: 0014_gang_reach
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_dataset_size_bigint"
down_revision = "0014_gang_reach"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dataset") as batch:
        batch.alter_column(
            "size_bytes", existing_type=sa.Integer(), type_=sa.BigInteger(), existing_nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("dataset") as batch:
        batch.alter_column(
            "size_bytes", existing_type=sa.BigInteger(), type_=sa.Integer(), existing_nullable=False
        )
