"""Engine and sessions; no FastAPI here, so the worker and the training child reuse it.

SQLite (the embedded default) is shared by the API, the worker and the training child: WAL lets
readers run beside the writer, a busy timeout makes writers wait instead of failing, and
BEGIN IMMEDIATE takes the write lock up front so a read-then-write never hits "database is locked"
on the upgrade (RELIABILITY.md P40).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from app.core.config import get_settings

# Connections per process; API requests may hold DB_SLOTS of them at once (app.api.deps), the
# rest are for the process's own background work (event poller, reaper, /metrics scrape).
POOL_SIZE, POOL_OVERFLOW = 10, 20
DB_SLOTS = POOL_SIZE + POOL_OVERFLOW - 5

_engines: dict[tuple[int, str], Engine] = {}
_factories: dict[Engine, sessionmaker[Session]] = {}
_readers: dict[Engine, Engine] = {}
# An execution option of read_engine() on SQLite: begin no transaction (see _configure_sqlite).
READ_ONLY = "epochal_read_only"
_engines_lock = threading.Lock()


def make_engine(url: str) -> Engine:
    """An engine tuned for the backend behind the URL."""
    if url.startswith("sqlite"):
        sqlite_args = {"timeout": 30, "check_same_thread": False}
        engine = create_engine(
            url, connect_args=sqlite_args, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW
        )
        _configure_sqlite(engine)
        return engine
    engine = create_engine(url, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW, pool_recycle=1800)
    ping_when_idle(engine)
    return engine


# A connection that was used within this many seconds is trusted without a round trip.
PING_AFTER_IDLE_SECONDS = 10.0


def ping_when_idle(engine: Engine) -> None:
    """pool_pre_ping, but only for connections idle a while: a busy API would otherwise pay a
    `SELECT 1` round trip on every request (~20 % of a metrics poll). A server restart is still
    noticed on the first use after a quiet spell; one that lands between two busy requests
    fails that request, and the pool then replaces every connection (SQLAlchemy invalidates
    the pool on a disconnect error)."""

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:  # the pool retries the checkout with a fresh connection
            raise DisconnectionError(f"stale connection: {exc}") from exc


def tune_sqlite(engine: Engine) -> None:
    """Give another library's SQLite engine (Optuna's) the pragmas and BEGIN IMMEDIATE above."""
    _configure_sqlite(engine)


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
        if conn.get_execution_options().get(READ_ONLY):
            return  # each statement its own read transaction: no write lock taken
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def get_engine() -> Engine:
    """The engine of this process (a forked child gets its own, P39)."""
    url = get_settings().sqlalchemy_url
    key = (os.getpid(), url)
    engine = _engines.get(key)
    if engine is None:
        # The API's first burst of requests arrives on many threads at once: without the
        # lock each made an engine (and a pool) of its own, and 200 SSE clients used up
        # PostgreSQL's 100 connections.
        with _engines_lock:
            engine = _engines.get(key)
            if engine is None:
                engine = _engines[key] = make_engine(url)
    return engine


def session_factory() -> sessionmaker[Session]:
    """The sessionmaker of this process's engine, made once: building one defines a Session
    subclass and its event dispatch, ~0.5 ms that a request should not pay."""
    engine = get_engine()
    factory = _factories.get(engine)
    if factory is None:
        with _engines_lock:
            made = sessionmaker(bind=engine, expire_on_commit=False)
            factory = _factories.setdefault(engine, made)
    return factory


def read_engine() -> Engine:
    """This process's engine for reads that need no transaction of their own: each statement
    sees what is committed. On PostgreSQL it is autocommit (no BEGIN and ROLLBACK round trips);
    on SQLite no BEGIN IMMEDIATE, so a read never takes the write lock. Same pool."""
    engine = get_engine()
    reader = _readers.get(engine)
    if reader is None:
        options: dict[str, Any] = (
            {READ_ONLY: True}
            if engine.dialect.name == "sqlite"
            else {"isolation_level": "AUTOCOMMIT"}
        )
        with _engines_lock:
            reader = _readers.setdefault(engine, engine.execution_options(**options))
    return reader


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
    for engine in list(_engines.values()):
        engine.dispose(close=False)
    _engines.clear()
    _factories.clear()
    _readers.clear()
