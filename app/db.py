"""Engine and sessions; no FastAPI here, so the worker and the training child reuse it.

SQLite (the embedded default) is shared by the API, the worker and the training child: WAL lets
readers run beside the writer, a busy timeout makes writers wait instead of failing, and
BEGIN IMMEDIATE takes the write lock up front so a read-then-write never hits "database is locked"
on the upgrade (reference/reliability.md P40).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from app.config import get_settings

_engines: dict[tuple[int, str], Engine] = {}


def make_engine(url: str) -> Engine:
    """An engine tuned for the backend behind the URL."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        _configure_sqlite(engine)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let SQLAlchemy's begin below own transactions
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def get_engine() -> Engine:
    """The engine of this process (a forked child gets its own, P39)."""
    url = get_settings().sqlalchemy_url
    key = (os.getpid(), url)
    if key not in _engines:
        _engines[key] = make_engine(url)
    return _engines[key]


def session_factory() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


@contextmanager
def session_scope() -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with session_factory()() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def reset_engines() -> None:
    """Forget cached engines (tests switch databases; forked processes start afresh)."""
    for engine in _engines.values():
        engine.dispose(close=False)
    _engines.clear()
