"""The engine on real databases (app.core.db). The embedded default's SQLite: WAL, a 30 s busy
timeout, foreign keys, and write transactions that take the lock up front. PostgreSQL: a pooled
connection the server dropped while it sat idle is replaced without failing the caller, and a
busy one costs no extra round trip."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from app.core import db
from app.core.config import get_settings
from app.core.db import get_engine, session_scope

PRAGMAS = ("journal_mode", "busy_timeout", "foreign_keys")


def test_every_sqlite_connection_gets_wal_and_a_busy_timeout(sqlite_env: dict[str, str]) -> None:
    engine = get_engine()
    assert engine.url.get_backend_name() == "sqlite"
    first, second = engine.raw_connection(), engine.raw_connection()  # two pooled connections
    try:
        for conn in (first, second):
            cursor = conn.cursor()
            pragmas = [cursor.execute(f"PRAGMA {name}").fetchone()[0] for name in PRAGMAS]
            assert pragmas == ["wal", 30000, 1]
    finally:
        first.close()
        second.close()


def test_a_transaction_takes_the_write_lock_at_begin(sqlite_env: dict[str, str]) -> None:
    """BEGIN IMMEDIATE: a session that has only read already holds the write lock, so its later
    write cannot fail with "database is locked" on the upgrade; other writers wait instead."""
    other = sqlite3.connect(get_settings().sqlalchemy_url.removeprefix("sqlite:///"), timeout=0)
    try:
        with session_scope() as session:
            session.execute(text("SELECT 1"))
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")  # free again once the session committed
        other.rollback()
    finally:
        other.close()


def backend_pid() -> int:
    with db.get_engine().connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_killed_while_idle_is_replaced_not_failed(
    pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = backend_pid()
    # The server drops the pooled connection (a restart, an idle timeout, a failover).
    other = create_engine(pg_env["EPOCHAL_DATABASE_URL"])
    with other.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first}).scalar()
    other.dispose()
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)  # it has been idle "a while"
    assert backend_pid() != first  # answered, on a new connection


def test_only_a_connection_idle_for_a_while_is_pinged(
    pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dialect = db.get_engine().dialect
    pings: list[Any] = []
    real_ping = dialect.do_ping
    monkeypatch.setattr(dialect, "do_ping", lambda conn: pings.append(conn) or real_ping(conn))
    same = {backend_pid() for _ in range(5)}  # back to back: one connection, trusted
    assert len(same) == 1 and pings == []
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)
    assert backend_pid() in same and len(pings) == 1
