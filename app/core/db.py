"""Engine and sessions; no FastAPI here, so the worker and the training child reuse it.

SQLite (the embedded default) is shared by the API, the worker and the training child: WAL lets
readers run beside the writer, a busy timeout makes writers wait instead of failing, and
BEGIN IMMEDIATE takes the write lock up front so a read-then-write never hits "database is locked"
on the upgrade (RELIABILITY.md P40).

PostgreSQL connections never wait forever: a connect timeout, a statement (and idle
transaction) timeout on the server, and TCP keepalives; a pooled connection the server closed
is replaced at checkout, and `retrying` rides out a restart (RELIABILITY.md §11).
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from sqlalchemy import CursorResult, Engine, Executable, create_engine, event, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.core.config import Settings, get_settings

log = logging.getLogger(__name__)
T = TypeVar("T")

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
# Set by a training child (hold_rows_at_most): its transactions left idle end sooner.
_idle_transaction_seconds: float | None = None


def make_engine(url: str) -> Engine:
    """An engine tuned for the backend behind the URL."""
    if url.startswith("sqlite"):
        sqlite_args = {"timeout": 30, "check_same_thread": False}
        engine = create_engine(
            url, connect_args=sqlite_args, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW
        )
        _configure_sqlite(engine)
        return engine
    engine = create_engine(
        url,
        pool_size=POOL_SIZE,
        max_overflow=POOL_OVERFLOW,
        pool_recycle=1800,
        connect_args=postgres_connect_args(get_settings(), make_url(url).query.get("options")),
    )
    _ping_when_idle(engine)
    return engine


def postgres_connect_args(settings: Settings, options: Any = None) -> dict[str, Any]:
    """libpq parameters so that no connection waits forever: connecting, a statement, a
    transaction its client left open (it holds row locks the reaper needs), a dead peer."""
    statement_ms = int(settings.db_statement_timeout_seconds * 1000)
    idle_ms = statement_ms
    if _idle_transaction_seconds is not None:
        idle_ms = min(statement_ms, int(_idle_transaction_seconds * 1000))
    keepalive = settings.db_keepalive_seconds
    server = f"-c statement_timeout={statement_ms} "
    server += f"-c idle_in_transaction_session_timeout={idle_ms}"
    return {
        "connect_timeout": settings.db_connect_timeout_seconds,
        "keepalives": 1,
        "keepalives_idle": keepalive,
        "keepalives_interval": keepalive,
        "keepalives_count": KEEPALIVE_PROBES,
        # Data sent and never acknowledged (a peer gone mid-request) also ends the connection.
        "tcp_user_timeout": (KEEPALIVE_PROBES + 1) * keepalive * 1000,
        "options": f"{options} {server}" if isinstance(options, str) else server,
    }


def hold_rows_at_most(seconds: float | None) -> None:
    """PostgreSQL ends this process's transactions left idle after `seconds` (at most the
    statement timeout; None: the statement timeout), on connections made from now on.

    A training child writes the job's row (an epoch's metrics, the latest checkpoint). Stopped
    or hung inside that transaction, it would hold the row lock that its supervisor's lease
    renewal waits on, and the supervisor would give the job up as lost before the statement
    timeout freed it. The child sets a share of the lease here, so the renewal goes through.
    """
    global _idle_transaction_seconds
    _idle_transaction_seconds = seconds


KEEPALIVE_PROBES = 3  # unanswered keepalive probes before the kernel drops the connection
# A connection that was used within this many seconds is trusted without a round trip.
PING_AFTER_IDLE_SECONDS = 10.0


def _ping_when_idle(engine: Engine) -> None:
    """pool_pre_ping, but only where it can find something: a busy API would otherwise pay a
    `SELECT 1` round trip on every request (~20 % of a metrics poll). A connection the server
    closed (a restart, pg_terminate_backend) has its goodbye waiting on the socket, which a
    zero-timeout poll sees without a round trip, so it is pinged (and replaced) at once; one
    idle a while is pinged too, for a peer that vanished without a word."""

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None:  # new: it has just connected
            return
        idle_long = time.monotonic() - idle_since >= PING_AFTER_IDLE_SECONDS
        if not idle_long and not has_input(dbapi_conn):
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:  # the pool retries the checkout with a fresh connection
            raise DisconnectionError(f"stale connection: {exc}") from exc


def has_input(dbapi_conn: Any) -> bool:
    """Whether an idle connection's socket has something to read: between our requests the
    server only writes when it closes the connection (we never LISTEN)."""
    try:
        poller = select.poll()
        poller.register(dbapi_conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no socket any more: ping to find out
        return True


def transient(exc: BaseException) -> bool:
    """A database failure a new connection may not meet: the server away or restarting, our
    connection cut, a statement timeout."""
    return isinstance(exc, OperationalError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


RETRY_FIRST_DELAY, RETRY_MAX_DELAY = 0.2, 2.0


def retrying(action: Callable[[], T], within: float, what: str) -> T:
    """`action()`, again after each transient failure with backoff, for at most `within` s.

    Each try must open its own session (a fresh transaction), so only writes that are
    idempotent or fenced by attempt belong here: a try whose commit was lost may have landed.
    """
    deadline, delay = time.monotonic() + within, RETRY_FIRST_DELAY
    while True:
        try:
            return action()
        except DBAPIError as exc:
            if not transient(exc) or time.monotonic() + delay > deadline:
                raise
            reason = str(exc.orig or exc).strip().splitlines()[0]
            log.warning("database unavailable (%s): %s; retrying in %.1fs", what, reason, delay)
            time.sleep(delay)
            delay = min(2 * delay, RETRY_MAX_DELAY)


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


def rows_changed(session: Session, statement: Executable) -> int:
    """Run an UPDATE or DELETE and say how many rows it matched."""
    return cast(CursorResult[Any], session.execute(statement)).rowcount
