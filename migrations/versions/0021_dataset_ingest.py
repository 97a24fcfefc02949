"""Data sets ingested into shards: a status (ingesting, ready, failed), the error naming the
file and record, the storage (npz or shards), the version, what the ingest reads, its
progress and its lease; and the resumable uploads in progress.

Revision ID: 0021_dataset_ingest
Revises: 0020_gang_secret
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

TS = sa.DateTime(timezone=True)

revision = "0021_dataset_ingest"
down_revision = "0020_gang_secret"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dataset") as batch:
        batch.alter_column(
            "format", existing_type=sa.String(8), type_=sa.String(32), existing_nullable=False
        )
        batch.add_column(sa.Column("status", sa.String(16), nullable=False, server_default="ready"))
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("storage", sa.String(8), nullable=False, server_default="npz"))
        batch.add_column(sa.Column("version", sa.String(64), nullable=True))
        batch.add_column(sa.Column("source", sa.Text(), nullable=True))
        batch.add_column(sa.Column("label_column", sa.String(256), nullable=True))
        batch.add_column(sa.Column("progress", sa.Float(), nullable=True))
        batch.add_column(sa.Column("ingest_sent_at", TS, nullable=True))
        batch.add_column(sa.Column("ingest_lease_at", TS, nullable=True))
    op.create_table(
        "dataset_upload",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("owner_id", sa.String(16), nullable=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("task", sa.String(16), nullable=False),
        sa.Column("format", sa.String(32), nullable=True),
        sa.Column("label_column", sa.String(256), nullable=True),
        sa.Column("filename", sa.String(128), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("store_key", sa.Text(), nullable=False),
        sa.Column("store_upload_id", sa.Text(), nullable=False),
        sa.Column("parts", sa.JSON(), nullable=False),
        sa.Column("received_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["api_key.id"], name="fk_dataset_upload_owner_id_api_key"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_dataset_upload"),
    )
    op.create_index("ix_dataset_upload_owner_id", "dataset_upload", ["owner_id"])
    op.create_index("ix_dataset_upload_updated_at", "dataset_upload", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_dataset_upload_updated_at", "dataset_upload")
    op.drop_index("ix_dataset_upload_owner_id", "dataset_upload")
    op.drop_table("dataset_upload")
    with op.batch_alter_table("dataset") as batch:
        dropped = ("ingest_lease_at", "ingest_sent_at", "progress", "label_column", "source")
        for column in (*dropped, "version", "storage", "error"):
            batch.drop_column(column)
        batch.drop_column("status")
        batch.alter_column(
            "format", existing_type=sa.String(32), type_=sa.String(8), existing_nullable=False
        )
