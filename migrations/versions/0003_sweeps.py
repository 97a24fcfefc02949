"""Sweeps: the sweep table and each trial job's sweep (Optuna keeps its own tables beside them).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
# Optuna's RDBStorage tables (created by `epochal migrate` or on the first sweep): a downgrade
# past sweeps takes the search state with it.
OPTUNA_TABLES = (
    "trial_heartbeats",
    "trial_intermediate_values",
    "trial_values",
    "trial_system_attributes",
    "trial_user_attributes",
    "trial_params",
    "trials",
    "study_system_attributes",
    "study_user_attributes",
    "study_directions",
    "studies",
    "version_info",
)


def upgrade() -> None:
    op.create_table(
        "sweep",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("owner_id", sa.String(16)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("trials_launched", sa.Integer(), nullable=False),
        sa.Column("trials_ended", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("finished_at", TS),
        sa.PrimaryKeyConstraint("id", name="pk_sweep"),
        sa.ForeignKeyConstraint(["owner_id"], ["api_key.id"], name="fk_sweep_owner_id_api_key"),
    )
    op.create_index("ix_sweep_owner_id", "sweep", ["owner_id"])
    op.create_index("ix_sweep_created", "sweep", ["created_at", "id"])
    op.create_index("ix_sweep_finished_at", "sweep", ["finished_at"])
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("sweep_id", sa.String(36)))
        batch.add_column(sa.Column("sweep_trial", sa.Integer()))
        batch.create_foreign_key("fk_job_sweep_id_sweep", "sweep", ["sweep_id"], ["id"])
        batch.create_index("ix_job_sweep_id", ["sweep_id"])


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_index("ix_job_sweep_id")
        batch.drop_constraint("fk_job_sweep_id_sweep", type_="foreignkey")
        batch.drop_column("sweep_trial")
        batch.drop_column("sweep_id")
    op.drop_index("ix_sweep_finished_at", table_name="sweep")
    op.drop_index("ix_sweep_created", table_name="sweep")
    op.drop_index("ix_sweep_owner_id", table_name="sweep")
    op.drop_table("sweep")
    for table in OPTUNA_TABLES:
        op.execute(f"DROP TABLE IF EXISTS {table}")
