"""A gang's per-attempt secret on each of its seats: made when the gang forms, read by each
seat's worker, proved by every rank before it may use the gang's rendezvous store.

Revision ID: 0020_gang_secret
Revises: 0019_queue_standing
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_gang_secret"
down_revision = "0019_queue_standing"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gang_member", sa.Column("secret", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("gang_member", "secret")
