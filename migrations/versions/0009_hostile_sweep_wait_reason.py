"""Why a running sweep launches no trial now (`sweep.wait_reason`): its owner's active-job
limit or storage quota, written by the controller at each top-up.

Revision ID: 0007_hostile
Revises: 0007_model_summary
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_hostile"
down_revision = "0007_sequence_data"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sweep", sa.Column("wait_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("sweep", "wait_reason")
