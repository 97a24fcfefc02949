"""A job's artifacts count in its key's storage quota: `job.disk_bytes`, the estimate of its
checkpoints and model reserved at submit, then what its directory holds once an attempt ends.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job", sa.Column("disk_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("job", "disk_bytes")
