"""Alembic environment: the URL comes from EPOCHAL_DATABASE_URL (or the embedded default)."""

from __future__ import annotations

from alembic import context

from app.core.config import get_settings
from app.core.db import make_engine
from app.domain.tables import Base

target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = context.config.get_main_option("sqlalchemy.url") or get_settings().sqlalchemy_url
    engine = make_engine(url)
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":  # a migration may rewrite a big table
            connection.exec_driver_sql("SET statement_timeout = 0")
            connection.exec_driver_sql("SET idle_in_transaction_session_timeout = 0")
            connection.commit()  # session settings stay; alembic then owns the transaction
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",  # ALTER on SQLite
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
