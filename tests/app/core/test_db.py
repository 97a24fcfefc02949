"""The engine on real databases (app.core.db). The embedded default's SQLite: WAL, a 30 s busy
timeout, foreign keys, and write transactions that take the lock up front. PostgreSQL: a pooled
connection the server dropped while it sat idle is replaced without failing the caller, and a
busy one costs no extra round trip."""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from app.core import db
from app.core.config import get_settings
from app.core.db import get_engine, session_scope
from tests.helpers import clear_caches, free_port, scaled

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
    terminate(pg_env["EPOCHAL_DATABASE_URL"], first)
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


def terminate(url: str, pid: int) -> None:
    """End a backend and wait until it has gone: without the wait (PostgreSQL 14+), the signal
    may not have reached a busy server's backend when the next checkout looks at the socket."""
    other = create_engine(url)
    with other.connect() as conn:
        ended = conn.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})
        assert ended.scalar()
    other.dispose()


def test_a_connection_the_server_closed_is_replaced_even_when_just_used(
    pg_env: dict[str, str],
) -> None:
    """pg_terminate_backend (or a restart) between two busy uses: the server's goodbye waits on
    the socket, so the checkout sees it without a round trip and the caller never fails.
    Before, only a connection idle for 10 s was checked and this use failed."""
    first = backend_pid()
    terminate(pg_env["EPOCHAL_DATABASE_URL"], first)
    assert backend_pid() != first


def test_retrying_rides_out_a_session_terminated_mid_transaction(pg_env: dict[str, str]) -> None:
    tries: list[int] = []

    def action() -> int:
        with session_scope() as session:
            pid = int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
            tries.append(pid)
            if len(tries) == 1:  # the server ends the connection while its transaction is open
                terminate(pg_env["EPOCHAL_DATABASE_URL"], pid)
            return int(session.execute(text("SELECT 41 + 1")).scalar_one())

    assert db.retrying(action, within=10, what="test") == 42
    assert len(tries) == 2 and tries[0] != tries[1]


def test_retrying_gives_up_after_its_bound_and_never_retries_a_real_error(
    pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[None] = []

    def broken() -> None:
        calls.append(None)
        with session_scope() as session:
            session.execute(text("SELECT no_such_column FROM job"))

    with pytest.raises(ProgrammingError):
        db.retrying(broken, within=10, what="test")
    assert len(calls) == 1
    with elsewhere(monkeypatch, free_port()):  # nothing listens there: refused, retried, out
        started = time.monotonic()
        with pytest.raises(OperationalError):
            db.retrying(lambda: backend_pid(), within=1.0, what="test")
        assert time.monotonic() - started < 1.0 + db.RETRY_MAX_DELAY


def test_postgres_connections_carry_timeouts_and_keepalives(
    pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_DB_STATEMENT_TIMEOUT_SECONDS", "0.5")
    clear_caches()
    with db.get_engine().connect() as conn:
        assert conn.execute(text("SHOW statement_timeout")).scalar() == "500ms"
        assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "500ms"
        params = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
        assert (params["keepalives"], params["keepalives_idle"]) == ("1", "10")
        assert params["connect_timeout"] == "10"
        with pytest.raises(OperationalError, match="statement timeout"):
            conn.execute(text("SELECT pg_sleep(5)"))


def test_a_transaction_a_training_child_left_idle_frees_its_locks_soon(
    pg_env: dict[str, str],
) -> None:
    """A child stopped inside a transaction (worker.child.launch) holds its locks only as long
    as hold_rows_at_most says, not the statement timeout: another connection gets them."""
    other = create_engine(db.get_engine().url, connect_args={"options": "-c lock_timeout=20s"})
    db.hold_rows_at_most(1.0)
    clear_caches()
    try:
        with db.get_engine().connect() as child, other.connect() as supervisor:
            idle = child.execute(text("SHOW idle_in_transaction_session_timeout")).scalar()
            assert idle == "1s"
            child.execute(text("SELECT pg_advisory_xact_lock(4711)"))  # then nothing: stopped
            started = time.monotonic()
            supervisor.execute(text("SELECT pg_advisory_xact_lock(4711)"))  # waits, then gets it
            waited = time.monotonic() - started
            with pytest.raises(DBAPIError) as ended:  # the server ended the idle one
                child.execute(text("SELECT 1"))
            assert db.transient(ended.value)  # so the child's write is tried again
        assert 0.5 < waited < 20  # ~1 s, where the 30 s statement timeout would have been hit
    finally:
        db.hold_rows_at_most(None)
        other.dispose()
        clear_caches()


def test_a_server_that_never_answers_fails_the_connect_after_its_timeout(
    pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_DB_CONNECT_TIMEOUT_SECONDS", "2")
    with (
        socket.create_server(("127.0.0.1", 0)) as silent,  # accepts TCP, never says a word
        elsewhere(monkeypatch, silent.getsockname()[1]),
    ):
        started = time.monotonic()
        with pytest.raises(OperationalError, match="timeout"):
            backend_pid()
        assert time.monotonic() - started < scaled(10)


@contextmanager
def elsewhere(monkeypatch: pytest.MonkeyPatch, port: int) -> Iterator[None]:
    """Point this process at a PostgreSQL URL on `port`; the fixtures' database after."""
    with monkeypatch.context() as patch:
        patch.setenv("EPOCHAL_DATABASE_URL", f"postgresql+psycopg://postgres@127.0.0.1:{port}/x")
        clear_caches()
        yield
    clear_caches()
