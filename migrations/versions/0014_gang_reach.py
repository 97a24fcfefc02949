"""A gang seat's host and whether its address is reached from that host only (loopback, the
Docker bridge), so a gang over several hosts with such an address is refused when it forms.

Revision ID: 0014_gang_reach
Revises: 0013_member_log
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_gang_reach"
down_revision = "0013_member_log"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gang_member", sa.Column("host", sa.String(255), nullable=True))
    op.add_column("gang_member", sa.Column("local_only", sa.String(32), nullable=True))


def downgrade() -> None:
    op.drop_column("gang_member", "local_only")
    op.drop_column("gang_member", "host")
