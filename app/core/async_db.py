"""Reads for the hot routes without a thread: on PostgreSQL a read runs on the event loop, its
Core statement compiled once and sent by asyncpg from a small pool per process. Three costs are
avoided: a thread-pool hop (with the GIL shared by the loop and the pool's threads, ~0.3 ms of
CPU here, more than the query), SQLAlchemy's async layer, and psycopg's async connections
(~0.2 ms of CPU per read through psycopg_pool here against ~0.08 ms for asyncpg's protocol,
which parses the wire in C and waits on the loop's transport; benchmarks/service.py). SQLite's
driver has no async side: there the same statement runs through SQLAlchemy on a thread.

Rows come back as plain tuples in the statement's column order, typed by the driver
(timestamptz as aware UTC datetimes on PostgreSQL; on SQLite SQLAlchemy's column types apply).
Whatever keeps the database from serving a read (no server, a refused or cut connection, a
statement timeout, no connection free in time) is raised as DatabaseUnavailable: the routes
answer it with a 503 (app.api.errors).
"""

from __future__ import annotations

import asyncio
import re
import shlex
import socket
import time
import weakref
from typing import Any

import anyio.to_thread
import asyncpg
from sqlalchemy import Select
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import make_url

from app.core import db
from app.core.config import get_settings

# Connections of each API process's pool: a read holds one for well under a millisecond, so a
# few serve thousands of reads a second, and a burst waits for one on the loop.
POOL_SIZE = 8
MAX_LIFETIME_SECONDS = 1800.0  # then a connection is replaced (server-side memory, failovers)
# What, raised by a read, means the database could not serve it rather than that it was wrong.
_UNAVAILABLE = (
    OSError,  # refused, unreachable, reset (ConnectionError is one)
    TimeoutError,  # connecting took longer than the connect timeout
    asyncpg.PostgresConnectionError,  # the server refused us (too many clients, not accepting)
    asyncpg.InterfaceError,  # the connection closed under the read
    asyncpg.exceptions.OperatorInterventionError,  # shut down, terminated, statement timeout
    asyncpg.exceptions.ObjectNotInPrerequisiteStateError,  # database not accepting connections
    asyncpg.exceptions.CannotConnectNowError,  # starting up or shutting down
    asyncpg.exceptions.InternalClientError,  # a connection the server left mid-operation
)
_PYFORMAT = re.compile(r"%\((\w+)\)s")
_DIALECT = PGDialect_asyncpg(paramstyle="numeric_dollar")


class DatabaseUnavailable(Exception):
    """The database could not serve a read now; the message says why (no traceback needed)."""


async def fetch(
    statement: Select[*tuple[Any, ...]], params: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """The rows of a read-only statement whose parameters are all named bindparams."""
    pool = _pool()
    if pool is None:
        return await anyio.to_thread.run_sync(_fetch_sqlite, statement, params)
    sql, names, literals = _compiled(statement)
    return (await pool.run([((sql, names), {**literals, **params})]))[0]


async def fetch_sql(
    statements: list[tuple[str, dict[str, Any]]],
) -> list[list[tuple[Any, ...]]] | None:
    """Rows of each PostgreSQL statement (SQL with %(name)s parameters), in order on one
    connection; None on SQLite, where the caller reads another way."""
    pool = _pool()
    if pool is None:
        return None
    return await pool.run([(_numbered(sql), params) for sql, params in statements])


_statements: dict[Select[*tuple[Any, ...]], tuple[str, tuple[str, ...], dict[str, Any]]] = {}
_sql: dict[str, tuple[str, tuple[str, ...]]] = {}


def _compiled(statement: Select[*tuple[Any, ...]]) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """The statement as asyncpg's SQL ($1, $2 ...), the parameter names in that order, and the
    values of those the statement itself holds (literals in a function call)."""
    found = _statements.get(statement)
    if found is None:
        compiled = statement.compile(dialect=_DIALECT)
        literals = {k: v for k, v in compiled.params.items() if v is not None}
        found = (str(compiled), tuple(compiled.positiontup or ()), literals)
        _statements[statement] = found
    return found


def _numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """%(name)s parameters as $1, $2 ... (one number per name), and the names in that order."""
    found = _sql.get(sql)
    if found is None:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        found = _sql[sql] = (_PYFORMAT.sub(number, sql), tuple(names))
    return found


async def _read(
    conn: asyncpg.Connection, statements: list[tuple[tuple[str, tuple[str, ...]], dict[str, Any]]]
) -> list[list[tuple[Any, ...]]]:
    """The statements' rows on this connection; a connection that fails or is cancelled
    mid-read is closed (its state is unknown)."""
    try:
        return [
            [tuple(row) for row in await conn.fetch(sql, *(params[name] for name in names))]
            for (sql, names), params in statements
        ]
    except BaseException:
        conn.terminate()
        raise


def _fetch_sqlite(
    statement: Select[*tuple[Any, ...]], params: dict[str, Any]
) -> list[tuple[Any, ...]]:
    with db.read_engine().connect() as conn:
        return [tuple(row) for row in conn.execute(statement, params)]


class ReadPool:
    """At most POOL_SIZE asyncpg connections of one event loop, each used by one read at a
    time. A connection is made when a read finds none free: after an outage the next read
    connects at once (no backoff of the pool's own), and while the server is away each read
    fails within the connect timeout."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.connect_args = connect_args(url)
        self.free: list[tuple[asyncpg.Connection, float, float]] = []  # conn, born, last used
        self.slots = asyncio.Semaphore(POOL_SIZE)  # one per connection, free or in use

    async def run(
        self, statements: list[tuple[tuple[str, tuple[str, ...]], dict[str, Any]]]
    ) -> list[list[tuple[Any, ...]]]:
        """Each statement's rows, in order on one connection."""
        timeout = float(get_settings().db_connect_timeout_seconds)
        await self._take_slot(timeout)
        try:
            conn, born, reused = await self._acquire(timeout)
            try:
                out = await _read(conn, statements)
            except _UNAVAILABLE:
                if not reused:
                    raise
                # A pooled connection can die after its last read (a server restart,
                # pg_terminate_backend) before the loop has seen it: a read changes nothing,
                # so it is tried once more, on a new connection.
                conn, born, _ = await self._connect(timeout)
                out = await _read(conn, statements)
            self.free.append((conn, born, time.monotonic()))
            return out
        except _UNAVAILABLE as exc:
            raise DatabaseUnavailable(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.slots.release()

    async def _take_slot(self, timeout: float) -> None:
        if not self.slots.locked():
            await self.slots.acquire()  # returns at once
            return
        try:  # a burst: wait on the loop, within the connect timeout
            await asyncio.wait_for(self.slots.acquire(), timeout)
        except TimeoutError:
            raise DatabaseUnavailable(f"no connection free within {timeout:g} s") from None

    async def _acquire(self, timeout: float) -> tuple[asyncpg.Connection, float, bool]:
        """A free connection that can serve (reused: True), else a new one."""
        while self.free:
            conn, born, used = self.free.pop()
            if await self._usable(conn, born, used):
                return conn, born, True
        return await self._connect(timeout)

    async def _connect(self, timeout: float) -> tuple[asyncpg.Connection, float, bool]:
        conn = await asyncpg.connect(**self.connect_args, timeout=timeout)
        keep_alive(conn)
        return conn, time.monotonic(), False

    async def _usable(self, conn: asyncpg.Connection, born: float, used: float) -> bool:
        """Whether a free connection can serve: one the server closed is marked closed once the
        loop has read its goodbye, and pinged while the goodbye still waits on the socket; one
        idle a while is pinged too, for a peer that vanished without a word; an old one is
        replaced."""
        now = time.monotonic()
        if conn.is_closed() or now - born > MAX_LIFETIME_SECONDS:
            conn.terminate()
            return False
        sock = conn._transport.get_extra_info("socket")  # noqa: SLF001 (no public accessor)
        if now - used >= db.PING_AFTER_IDLE_SECONDS or db.has_input(sock):
            try:
                await conn.execute("SELECT 1")
            except BaseException as exc:
                conn.terminate()
                if not isinstance(exc, Exception):  # cancelled: the read goes no further
                    raise
                return False
        return True

    async def close(self) -> None:
        """Close the free connections (those in use close when their reads end)."""
        free, self.free = self.free, []
        for conn, _, _ in free:
            try:
                await conn.close(timeout=1)
            except Exception:  # gone already: nothing to close
                conn.terminate()


# One pool per event loop: a connection belongs to the loop that opened it (uvicorn has one
# loop per process; each test client its own).
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReadPool] = weakref.WeakKeyDictionary()


def _pool() -> ReadPool | None:
    """The running loop's pool on PostgreSQL; None on SQLite."""
    url = get_settings().sqlalchemy_url
    if not url.startswith("postgresql"):
        return None
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None or pool.url != url:
        pool = _pools[loop] = ReadPool(url)
    return pool


def connect_args(url: str) -> dict[str, Any]:
    """asyncpg.connect's arguments for a SQLAlchemy URL, with the server settings every epochal
    connection carries (statement and idle-in-transaction timeouts, any -c of the URL's
    options: app.core.db.postgres_connect_args)."""
    parsed = make_url(url)
    options = parsed.query.get("options")
    limits = db.postgres_connect_args(get_settings(), options)
    words = shlex.split(str(limits["options"]))
    settings = dict(
        word.split("=", 1) for flag, word in zip(words, words[1:], strict=False) if flag == "-c"
    )
    query = {name: str(value) for name, value in parsed.query.items()}
    ssl = {"ssl": query["sslmode"]} if "sslmode" in query else {}  # asyncpg takes libpq's modes
    return {
        **ssl,
        "host": parsed.host or query.get("host") or "localhost",
        "port": parsed.port or 5432,
        "user": parsed.username,
        "password": parsed.password,
        "database": parsed.database,
        "server_settings": settings,
        "statement_cache_size": 64,
    }


def keep_alive(conn: asyncpg.Connection) -> None:
    """The TCP keepalives and user timeout libpq sets for the other pools (a dead peer ends the
    connection instead of a read waiting forever); asyncpg has no parameters for them."""
    sock = conn._transport.get_extra_info("socket")  # noqa: SLF001
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    limits = db.postgres_connect_args(get_settings())
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, limits["keepalives_idle"])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, limits["keepalives_interval"])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, limits["keepalives_count"])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, limits["tcp_user_timeout"])


def pg_conninfo(url: str) -> tuple[str, dict[str, Any]]:
    """libpq's conninfo for a SQLAlchemy URL, and the limits every epochal connection carries
    (connect and statement timeouts, keepalives: app.core.db.postgres_connect_args)."""
    parsed = make_url(url)
    options = parsed.query.get("options")
    plain = parsed.set(drivername="postgresql").difference_update_query(["options"])
    limits = db.postgres_connect_args(get_settings(), options)
    return plain.render_as_string(hide_password=False), limits


async def close_pool() -> None:
    """Close the running loop's connections (at the app's shutdown)."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.close()
