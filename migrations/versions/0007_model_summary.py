"""The job resource carries its model's summary: `job.model_summary`, the built graph's
parameters, FLOPs per sample and layers (with output shapes), computed at submit.

Jobs stored before this revision keep null: their summary is not recomputed here, because a
migration must not depend on the model code of a later version.

Revision ID: 0007_model_summary
Revises: 0006
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_model_summary"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job", sa.Column("model_summary", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("job", "model_summary")
