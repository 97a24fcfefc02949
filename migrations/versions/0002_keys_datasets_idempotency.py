"""API keys and job ownership, uploaded data sets, idempotent submit.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_key",
        sa.Column("id", sa.String(16), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS),
        sa.PrimaryKeyConstraint("id", name="pk_api_key"),
    )
    op.create_table(
        "dataset",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("owner_id", sa.String(16)),
        sa.Column("format", sa.String(8), nullable=False),
        sa.Column("task", sa.String(16), nullable=False),
        sa.Column("shape", sa.JSON(), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("test_samples", sa.Integer()),
        sa.Column("classes", sa.Integer()),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("checksum", sa.String(64), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_dataset"),
        sa.ForeignKeyConstraint(["owner_id"], ["api_key.id"], name="fk_dataset_owner_id_api_key"),
    )
    op.create_index("ix_dataset_owner_id", "dataset", ["owner_id"])
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("owner_id", sa.String(16)))
        batch.add_column(sa.Column("idempotency_key", sa.String(255)))
        batch.add_column(sa.Column("request_hash", sa.String(64)))
        batch.create_foreign_key("fk_job_owner_id_api_key", "api_key", ["owner_id"], ["id"])
        batch.create_unique_constraint(
            "uq_job_owner_idempotency_key", ["owner_id", "idempotency_key"]
        )
        batch.create_index("ix_job_owner_id", ["owner_id"])


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_index("ix_job_owner_id")
        batch.drop_constraint("uq_job_owner_idempotency_key", type_="unique")
        batch.drop_constraint("fk_job_owner_id_api_key", type_="foreignkey")
        batch.drop_column("request_hash")
        batch.drop_column("idempotency_key")
        batch.drop_column("owner_id")
    op.drop_index("ix_dataset_owner_id", table_name="dataset")
    op.drop_table("dataset")
    op.drop_table("api_key")
