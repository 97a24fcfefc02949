"""Migrations: upgrade from empty, downgrade to nothing, upgrade again; models match them."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.cli import alembic_config
from app.core.db import get_engine
from app.domain.tables import Base


def table_names() -> set[str]:
    return set(sa.inspect(get_engine()).get_table_names()) - {"alembic_version"}


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
