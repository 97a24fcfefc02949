"""Reads for the hot routes without a thread: on PostgreSQL a read runs on the event loop, its
Core statement compiled once and sent by psycopg's async connections (autocommit, from a small
pool per process). Two costs are avoided: a thread-pool hop (with the GIL shared by the loop and
the pool's threads, ~0.3 ms of CPU here, more than the query) and SQLAlchemy's async layer
(~0.2 ms over psycopg's own ~0.1 ms per read). SQLite's driver has no async side: there the
same statement runs through SQLAlchemy on a thread.

Rows come back as plain tuples in the statement's column order, typed by the driver
(timestamptz as aware datetimes on PostgreSQL; on SQLite SQLAlchemy's column types apply).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

import anyio.to_thread
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import Select
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import make_url

from app.core import db
from app.core.config import get_settings

# Connections of each API process's pool: a read holds one for well under a millisecond, so a
# few serve thousands of reads a second, and a burst waits for one on the loop.
POOL_SIZE = 8
# How long the pool keeps retrying a connection in the background once one failed.
RECONNECT_GIVE_UP_SECONDS = 3.0

# One pool per event loop: an async connection belongs to the loop that opened it (uvicorn
# has one loop per process; each test client its own).
_pools: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[str, AsyncConnectionPool, asyncio.Future[None]]
] = weakref.WeakKeyDictionary()
_last_used: weakref.WeakKeyDictionary[AsyncConnection[Any], float] = weakref.WeakKeyDictionary()
_compiled: dict[Select[Any], str] = {}
_DIALECT = PGDialect_psycopg()


async def fetch(statement: Select[Any], params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of a read-only statement whose parameters are all named bindparams."""
    pool = await _pool()
    if pool is None:
        return await anyio.to_thread.run_sync(_fetch_sqlite, statement, params)
    sql = _compiled.get(statement)
    if sql is None:
        sql = _compiled[statement] = str(statement.compile(dialect=_DIALECT))
    return (await _run(pool, [(sql, params)]))[0]


async def fetch_sql(
    statements: list[tuple[str, dict[str, Any]]],
) -> list[list[tuple[Any, ...]]] | None:
    """Rows of each PostgreSQL statement (psycopg's own SQL), in order on one connection;
    None on SQLite, where the caller reads another way."""
    pool = await _pool()
    return None if pool is None else await _run(pool, statements)


async def _run(
    pool: AsyncConnectionPool, statements: list[tuple[str, dict[str, Any]]]
) -> list[list[tuple[Any, ...]]]:
    out = []
    async with pool.connection() as conn:
        for sql, params in statements:
            cursor = await conn.execute(sql, params)
            out.append(await cursor.fetchall())
        _last_used[conn] = time.monotonic()
    return out


def _fetch_sqlite(statement: Select[Any], params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with db.read_engine().connect() as conn:
        return [tuple(row) for row in conn.execute(statement, params)]


async def _pool() -> AsyncConnectionPool | None:
    """The running loop's pool on PostgreSQL (opened on first use); None on SQLite."""
    url = get_settings().sqlalchemy_url
    if not url.startswith("postgresql"):
        return None
    loop = asyncio.get_running_loop()
    made = _pools.get(loop)
    if made is None or made[0] != url:
        made = _pools[loop] = _new_pool(url)
    await made[2]  # opened (at once after the first request started it)
    return made[1]


def _new_pool(url: str) -> tuple[str, AsyncConnectionPool, asyncio.Future[None]]:
    conninfo, limits = pg_conninfo(url)
    pool = AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=POOL_SIZE,
        kwargs={"autocommit": True, **limits},
        check=_check_when_idle,
        # While the server is away a request waits this long for a connection, then its 503
        # (app.api.errors) says to retry, instead of psycopg_pool's 30 s default.
        timeout=float(get_settings().db_connect_timeout_seconds),
        # psycopg_pool retries a failed connect with a doubling delay (1, 2, 4 ... s) for
        # reconnect_timeout, 5 min by default: after an outage of a minute the pool could sit
        # out half a minute more with the server back, every read a 503. Giving up after a few
        # seconds hands the retry to the next request, which connects at once.
        reconnect_timeout=RECONNECT_GIVE_UP_SECONDS,
        max_lifetime=1800,
        open=False,
    )
    return url, pool, asyncio.ensure_future(pool.open())


def pg_conninfo(url: str) -> tuple[str, dict[str, Any]]:
    """libpq's conninfo for a SQLAlchemy URL, and the limits every epochal connection carries
    (connect and statement timeouts, keepalives: app.core.db.postgres_connect_args)."""
    parsed = make_url(url)
    options = parsed.query.get("options")
    plain = parsed.set(drivername="postgresql").difference_update_query(["options"])
    limits = db.postgres_connect_args(get_settings(), options)
    return plain.render_as_string(hide_password=False), limits


async def _check_when_idle(conn: AsyncConnection[Any]) -> None:
    """Ping a connection the server closed (its goodbye is waiting on the socket) or that sat
    idle a while, as app.core.db does for its pool: a dead one fails here, and the pool hands
    out another instead of failing the request."""
    idle_since = _last_used.get(conn)
    idle_long = idle_since is None or time.monotonic() - idle_since >= db.PING_AFTER_IDLE_SECONDS
    if idle_long or db.has_input(conn):
        await conn.execute("")


async def close_pool() -> None:
    """Close the running loop's connections (at the app's shutdown)."""
    made = _pools.pop(asyncio.get_running_loop(), None)
    if made is not None:
        await made[1].close()
