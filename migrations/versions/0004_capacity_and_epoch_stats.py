"""Worker capacity (host memory and free artifacts disk, from the heartbeat) and running epoch
totals per framework and duration bucket (what /metrics reads instead of scanning epochs).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# The bounds of app.domain.epoch_stats at the time of this revision (a migration is frozen).
BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


def _bucket_expression() -> str:
    whens = " ".join(f"WHEN m.epoch_seconds <= {b} THEN {i}" for i, b in enumerate(BOUNDS))
    return f"CASE WHEN m.epoch_seconds IS NULL THEN -1 {whens} ELSE {len(BOUNDS)} END"


def upgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.add_column(sa.Column("memory_bytes", sa.BigInteger()))
        batch.add_column(sa.Column("disk_free_bytes", sa.BigInteger()))
    op.create_table(
        "epoch_stat",
        sa.Column("framework", sa.String(16), nullable=False),
        sa.Column("bucket", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("epochs", sa.BigInteger(), nullable=False),
        sa.Column("seconds_sum", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("framework", "bucket", name="pk_epoch_stat"),
    )
    # The history so far, counted once here rather than at every scrape.
    bucket = _bucket_expression()
    op.execute(
        "INSERT INTO epoch_stat (framework, bucket, epochs, seconds_sum) "
        f"SELECT j.framework, {bucket}, COUNT(*), COALESCE(SUM(m.epoch_seconds), 0) "
        "FROM epoch_metric m JOIN job j ON j.id = m.job_id "
        f"GROUP BY j.framework, {bucket}"
    )


def downgrade() -> None:
    op.drop_table("epoch_stat")
    with op.batch_alter_table("worker") as batch:
        batch.drop_column("disk_free_bytes")
        batch.drop_column("memory_bytes")
