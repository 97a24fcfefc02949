"""The embedded default's SQLite settings (app.db): WAL, a 30 s busy timeout, foreign keys, and
write transactions that take the lock up front."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text

from app.config import get_settings
from app.db import get_engine, session_scope

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
