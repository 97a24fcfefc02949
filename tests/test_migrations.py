"""Migrations: upgrade from empty, downgrade to nothing, upgrade again; models match them."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.cli import alembic_config
from app.core.db import get_engine, session_scope
from app.domain.tables import Base


def table_names() -> set[str]:
    """epochal's tables: a sweep test run before this one leaves Optuna's beside them."""
    from optuna.storages._rdb.models import BaseModel as OptunaModel

    present = set(sa.inspect(get_engine()).get_table_names())
    return present - {"alembic_version"} - set(OptunaModel.metadata.tables)


def test_upgrade_downgrade_upgrade_and_no_drift(db_env: dict[str, str]) -> None:
    config = alembic_config()
    assert table_names() == set(Base.metadata.tables)
    command.downgrade(config, "base")
    get_engine().dispose()
    assert table_names() == set()
    command.upgrade(config, "head")
    get_engine().dispose()
    with get_engine().connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_0004_counts_the_existing_epochs_into_the_totals(db_env: dict[str, str]) -> None:
    from app.domain import crud, epoch_rows
    from app.domain.epoch_stats import totals
    from app.schemas.job_spec import JobSpec

    spec = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "digits"}})
    with session_scope() as session:
        job = crud.create_job(session, spec, "gpus-0")
        job_id = job.id
    with session_scope() as session:
        crud.claim_job(session, job_id, "w1", lease_seconds=30)
    with session_scope() as session:
        for epoch, seconds in ((1, 0.05), (2, 7.0), (3, None)):
            epoch_rows.record_epoch(session, job_id, 1, epoch, {"epoch_seconds": seconds})
    config = alembic_config()
    command.downgrade(config, "0003")  # the epoch rows stay; the totals go
    get_engine().dispose()
    command.upgrade(config, "head")
    get_engine().dispose()
    with session_scope() as session:
        assert totals(session) == {"pytorch": {0: (1, 0.05), 6: (1, 7.0), -1: (1, 0.0)}}
