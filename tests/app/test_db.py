"""The engine's pooled connections on a real PostgreSQL: a connection the server dropped while
it sat idle is replaced without failing the caller, and a busy one costs no extra round trip."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text

from app import db


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
