"""What wakes the live-event hub (app.services.live_events) when a job's events are committed,
so a stream does not wait for the hub's next poll.

PostgreSQL pushes: the triggers of migration 0005 NOTIFY `epochal_events` with the job's id
when a transition or a metrics row is committed, and each API process LISTENs on one connection
of its own. SQLite cannot push: a connection of its own reads `PRAGMA data_version` (which moves
whenever another connection commits) every few milliseconds, and the hub reads events only
when it moved.

Either way a wake-up is only a hint: the hub reads the events itself, after each feed's cursor,
so a notification that is lost can delay an event but never lose or reorder one. After each
(re)connection the listener asks for a read at once, which catches up whatever was committed
while nobody listened; while it is away, the hub polls at its plain interval.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import psycopg
from sqlalchemy.engine import make_url

from app.core.async_db import pg_conninfo

log = logging.getLogger(__name__)

CHANNEL = "epochal_events"  # the channel migration 0005's triggers notify
APPLICATION_NAME = "epochal-events"  # the listening connection, as pg_stat_activity shows it
RETRY_SECONDS = (0.1, 5.0)  # reconnect after the first, doubling up to the second
PROBE_SECONDS = 5.0  # a quiet listening connection is checked this often
SQLITE_CHECK_SECONDS = 0.02

# Called with the job whose events were committed, or None for "any job may have some".
Wake = Callable[[str | None], None]


class Push(Protocol):
    """A source of wake-ups; `live` while it can be trusted to tell of every commit."""

    live: bool

    async def run(self, wake: Wake) -> None: ...


def push_for(url: str) -> Push | None:
    """The push source for this database URL (None for one without a file or a server)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        return PgListener(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return SqliteWatcher(parsed.database)
    return None


class PgListener:
    """LISTEN on a connection of this process's own; reconnects with a growing delay."""

    def __init__(self, url: str) -> None:
        self.conninfo, self.limits = pg_conninfo(url)
        self.live = False
        self.connects = 0  # how many times LISTEN was (re)established

    async def connect(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        return await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, application_name=APPLICATION_NAME, **self.limits
        )

    async def run(self, wake: Wake) -> None:
        delay = RETRY_SECONDS[0]
        while True:
            try:
                async with await self.connect() as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.live, delay = True, RETRY_SECONDS[0]
                    self.connects += 1
                    wake(None)  # catch up on what was committed while nobody listened
                    await self._relay(conn, wake)
            except (psycopg.Error, OSError, TimeoutError) as exc:
                log.warning("listening for job events: %s; polling until it is back", exc)
            finally:
                if self.live:
                    self.live = False
                    wake(None)  # the hub goes back to its plain interval now
            await asyncio.sleep(delay)
            delay = min(2 * delay, RETRY_SECONDS[1])

    @staticmethod
    async def _relay(conn: psycopg.AsyncConnection[tuple[object, ...]], wake: Wake) -> None:
        while True:
            async for notify in conn.notifies(timeout=PROBE_SECONDS):
                wake(notify.payload or None)
            # A connection that died without a word (no FIN) fails here instead of hanging.
            await asyncio.wait_for(conn.execute("SELECT 1"), PROBE_SECONDS)


class SqliteWatcher:
    """Wakes the hub when another connection committed to the SQLite file."""

    def __init__(self, path: str, every: float = SQLITE_CHECK_SECONDS) -> None:
        self.path, self.every = path, every
        self.live = False

    async def run(self, wake: Wake) -> None:
        while True:
            try:
                await self._watch(wake)
            except sqlite3.Error as exc:
                log.warning("watching %s for commits: %s; polling meanwhile", self.path, exc)
            finally:
                self.live = False
            await asyncio.sleep(RETRY_SECONDS[1])

    async def _watch(self, wake: Wake) -> None:
        # One thread owns the connection and runs its calls in order. A cancelled await does
        # not stop its call: the close, queued behind it on the same thread, waits for it.
        # Closed from here instead, mid-call on another thread, SQLite reads freed memory.
        executor = ThreadPoolExecutor(1, thread_name_prefix="sqlite-watch")
        loop = asyncio.get_running_loop()
        conn: sqlite3.Connection | None = None
        try:
            conn = await loop.run_in_executor(executor, _connect, self.path)
            last = await loop.run_in_executor(executor, _data_version, conn)
            self.live = True
            while True:
                await asyncio.sleep(self.every)
                version = await loop.run_in_executor(executor, _data_version, conn)
                if version != last:
                    last = version
                    wake(None)
        finally:
            if conn is not None:
                executor.submit(conn.close)
            executor.shutdown(wait=False)


def _connect(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])
