"""The database wakes the event hub (app.services.event_push): PostgreSQL's NOTIFY, SQLite's data
version. With the hub's own poll pushed out of reach (600 s), events still flow; a listening
connection killed by the server loses and reorders nothing."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest
from sqlalchemy import text

from app.core.config import get_settings
from app.core.db import get_engine
from app.services import event_push
from app.services.event_push import APPLICATION_NAME, PgListener, SqliteWatcher, push_for
from app.services.live_events import Cursor, Event, EventHub, read_new_events
from tests.app.services.test_events import claim, collect, epoch, finish, label, new_job
from tests.helpers import run_async, scaled, wait_until

NO_POLL = 600.0  # seconds: longer than any test waits, so only a wake-up delivers an event
EXPECTED = [
    ("transition", "queued"),
    ("transition", "running"),
    *(("epoch", (1, n)) for n in (1, 2, 3, 4)),
    ("transition", "succeeded"),
]


async def until(condition: Callable[[], Any], what: str) -> None:
    """Wait (on the loop) until `condition()` holds."""

    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), scaled(20))
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def test_commits_wake_the_hub_without_its_poll(db_env: dict[str, str]) -> None:
    job = new_job()
    push = push_for(get_settings().sqlalchemy_url)
    assert push is not None

    async def scenario() -> list[Any]:
        hub = EventHub(NO_POLL, push=push)
        stream = asyncio.create_task(collect(hub, job))
        await until(lambda: push.live, "the push source to be live")
        attempt = await asyncio.to_thread(claim, job)
        for n in (1, 2, 3, 4):
            await asyncio.to_thread(epoch, job, attempt, n, 1.0 / n)
        await asyncio.to_thread(finish, job, attempt)
        return await asyncio.wait_for(stream, scaled(20))

    events = run_async(scenario())
    assert [label(e) for e in events] == EXPECTED


def listener_pid() -> int | None:
    query = text(
        "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
        "AND datname = current_database()"
    )
    with get_engine().connect() as conn:
        return conn.execute(query, {"name": APPLICATION_NAME}).scalar()


def test_a_killed_listening_connection_loses_and_reorders_nothing(pg_env: dict[str, str]) -> None:
    """Events committed while the listener is gone (killed by pg_terminate_backend, its
    reconnection held back until they are written) arrive after it is back, in order, once."""
    job = new_job()
    listener = PgListener(pg_env["EPOCHAL_DATABASE_URL"])
    release = asyncio.Event()
    connect = listener.connect

    pids: list[int] = []

    async def held_reconnect() -> psycopg.AsyncConnection[tuple[object, ...]]:
        if listener.connects:  # the first connection goes through, the reconnection waits
            await release.wait()
        conn = await connect()
        pids.append(conn.info.backend_pid)
        return conn

    listener.connect = held_reconnect  # type: ignore[method-assign]

    reads: list[bool] = []  # whether the listener was live, at the end of each of the hub's reads

    def reader(cursors: Mapping[str, Cursor]) -> dict[str, list[Event]]:
        try:
            return read_new_events(cursors)
        finally:
            reads.append(listener.live)

    async def scenario() -> list[Any]:
        hub = EventHub(NO_POLL, reader, push=listener)
        hub._wake = wake = WatchedWake()
        stream = asyncio.create_task(collect(hub, job))
        await until(lambda: listener.live, "the listener to be live")
        attempt = await asyncio.to_thread(claim, job)
        for n in (1, 2):
            await asyncio.to_thread(epoch, job, attempt, n, 1.0)
        feed = hub.feeds[job]
        await until(lambda: len(feed.events) == 4, "queued, running and 2 epochs, by NOTIFY")
        first = await asyncio.to_thread(listener_pid)  # found by its application_name
        assert first == pids[0]
        await asyncio.to_thread(terminate, first)
        await until(lambda: not listener.live, "the listener to notice")
        # The hub reads once more when the listener goes; then nothing wakes it until it is back.
        # Idle: its last read ended with the listener gone (so it waits NO_POLL), and it waits.
        # (Not "no read running": between two reads there is a moment with none, and a slow
        # machine once committed epochs 3 and 4 in it, for the next read to find.)
        idle = lambda: reads and not reads[-1] and wake.waiting and not wake.is_set()  # noqa: E731
        await until(idle, "the hub's read after the listener went, and the hub idle")
        for n in (3, 4):  # committed while nobody listens: no notification will come
            await asyncio.to_thread(epoch, job, attempt, n, 1.0)
        await asyncio.to_thread(finish, job, attempt)
        assert len(feed.events) == 4
        release.set()  # back: its catch-up read delivers the rest
        events = await asyncio.wait_for(stream, scaled(20))
        assert listener.connects == 2 and len(pids) == 2 and pids[1] != first
        return events

    events = run_async(scenario())
    assert [label(e) for e in events] == EXPECTED
    ids = [Cursor.parse(e.id) for e in events]
    assert len(set(ids)) == len(ids)

    async def resumed() -> list[Any]:  # a client that saw epoch 2 before the kill comes back
        return await collect(EventHub(NO_POLL), job, ids[3])

    assert [label(e) for e in run_async(resumed())] == EXPECTED[4:]


class WatchedWake(asyncio.Event):
    """The hub's wake-up event, telling whether the hub is waiting on it."""

    waiting = False

    async def wait(self) -> Literal[True]:
        self.waiting = True
        try:
            return await super().wait()
        finally:
            self.waiting = False


def terminate(pid: int) -> None:
    with get_engine().connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()


def test_a_cancelled_sqlite_watch_closes_its_connection_after_the_call_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch cancelled (the app shutting down) while its PRAGMA runs on a thread: the close
    waits for that call. Closed from the loop mid-call, SQLite read freed memory (a segfault
    seen at an app's shutdown), or the call failed on a closed database."""
    path = tmp_path / "watched.db"
    sqlite3.connect(path).close()
    entered, release = threading.Event(), threading.Event()
    calls: list[int | Exception] = []
    connections: list[sqlite3.Connection] = []
    real = event_push._data_version

    def held_on_second_call(conn: sqlite3.Connection) -> int:
        connections.append(conn)
        if calls:  # the first read is the baseline; hold the next one mid-call
            entered.set()
            release.wait(scaled(10))
        try:
            version = real(conn)
        except sqlite3.Error as exc:
            calls.append(exc)
            raise
        calls.append(version)
        return version

    monkeypatch.setattr(event_push, "_data_version", held_on_second_call)

    async def cancel_mid_call() -> None:
        watch = asyncio.create_task(SqliteWatcher(str(path), every=0.01)._watch(lambda _: None))
        assert await asyncio.to_thread(entered.wait, scaled(10)), "the second read never began"
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        release.set()

    run_async(cancel_mid_call())
    wait_until(lambda: len(calls) == 2, 10, "the held read to end")
    assert isinstance(calls[1], int), calls

    def closed() -> bool:
        try:
            connections[0].execute("SELECT 1")
        except sqlite3.ProgrammingError:
            return True
        return False

    wait_until(closed, 10, "the watch's connection to be closed")
