"""Token data sets: `dataset.vocab`, the vocabulary size (max token id + 1) of an upload whose x
holds token ids; NULL for every other upload (real values), so existing rows keep their meaning.

Revision ID: 0007_sequence_data
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_sequence_data"
down_revision = "0007_model_summary"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("dataset", sa.Column("vocab", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("dataset", "vocab")
