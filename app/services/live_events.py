"""Live job events (for SSE): one reader per API process fans database changes out to subscribers.

The worker and the training child write transitions and metrics rows to the database, the source
of truth in every deployment; the API streams them. However many clients follow a job, each API
process reads the database once per wake-up for all the jobs being followed, then hands the new
events to every subscriber in memory. The database wakes it when something was committed
(app.services.event_push: LISTEN/NOTIFY on PostgreSQL, the data version on SQLite); a poll at
`interval` remains for while that is not live, and a slow one as a safety net.

An event id is a cursor "T.A.E": the last transition id and the (attempt, epoch) of the last
metrics row a client has seen. A client that reconnects with Last-Event-ID gets exactly what it
missed, including epochs that a resumed attempt wrote again after a lost worker.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Row, and_, or_, select
from sqlalchemy.engine import Connection

from app.core.config import get_settings
from app.core.db import read_engine
from app.domain.states import TERMINAL
from app.domain.tables import METRIC_FIELDS, EpochMetric, JobTransition
from app.observability.telemetry import EVENT_POLLS
from app.services.event_push import Push, push_for

log = logging.getLogger(__name__)
CURSOR = re.compile(r"^(\d{1,18})\.(\d{1,9})\.(\d{1,9})$")
# While the database pushes, the hub still reads this often (a safety net, not the way in).
PUSH_FALLBACK_SECONDS = 5.0
TRANSITIONS = JobTransition.__table__.c
METRICS = EpochMetric.__table__.c


@dataclass(frozen=True)
class Cursor:
    """Everything up to transition `transition` and metrics row (`attempt`, `epoch`) is seen."""

    transition: int = 0
    attempt: int = 0
    epoch: int = 0

    def __str__(self) -> str:
        return f"{self.transition}.{self.attempt}.{self.epoch}"

    @classmethod
    def parse(cls, raw: str | None) -> Cursor:
        if not raw:
            return cls()
        match = CURSOR.match(raw.strip())
        if match is None:
            raise ValueError(f"Last-Event-ID {raw[:64]!r} is not an event id of this stream")
        return cls(*(int(part) for part in match.groups()))

    def seen(self, event: Event) -> bool:
        if event.kind == "transition":
            return event.key[0] <= self.transition
        return event.key <= (self.attempt, self.epoch)

    def after(self, event: Event) -> Cursor:
        if event.kind == "transition":
            return Cursor(max(self.transition, event.key[0]), self.attempt, self.epoch)
        return Cursor(self.transition, *event.key)


@dataclass(frozen=True)
class Event:
    kind: str  # transition | epoch
    key: tuple[int, ...]  # (transition id,) or (attempt, epoch)
    at: datetime
    data: dict[str, Any]
    terminal: bool = False
    id: str = ""
    payload: str = ""  # `data` as JSON, written once however many subscribers send it


def _transition_event(row: Row[Any]) -> Event:
    data = {
        "job_id": row.job_id,
        "from_status": row.from_status,
        "to_status": row.to_status,
        "reason": row.reason,
        "attempt": row.attempt,
        "at": row.at.isoformat(),
    }
    return Event("transition", (row.id,), row.at, data, terminal=row.to_status in TERMINAL)


def _epoch_event(row: Row[Any]) -> Event:
    data = {"job_id": row.job_id, "epoch": row.epoch, "attempt": row.attempt}
    data |= {name: getattr(row, name) for name in METRIC_FIELDS}
    data["recorded_at"] = row.recorded_at.isoformat()
    return Event("epoch", (row.attempt, row.epoch), row.recorded_at, data)


def read_new(conn: Connection, cursors: Mapping[str, Cursor]) -> dict[str, list[Event]]:
    """New events of each job after its cursor, in order, each with its resume id."""
    if not cursors:
        return {}
    # Transitions first: once a terminal transition is visible, every metrics row of the job
    # (committed before it) is visible to the second query, so no epoch is announced late.
    transitions = conn.execute(
        select(*TRANSITIONS)
        .where(
            or_(
                *(
                    and_(TRANSITIONS.job_id == job, TRANSITIONS.id > c.transition)
                    for job, c in cursors.items()
                )
            )
        )
        .order_by(TRANSITIONS.id)
    ).all()
    rows = conn.execute(
        select(*METRICS)
        .where(or_(*(_rows_after(job, c) for job, c in cursors.items())))
        .order_by(METRICS.attempt, METRICS.epoch)
    ).all()
    found: dict[str, list[Event]] = {}
    for event in [*map(_transition_event, transitions), *map(_epoch_event, rows)]:
        found.setdefault(event.data["job_id"], []).append(event)
    return {job: _ordered(cursors[job], events) for job, events in found.items()}


def _rows_after(job_id: str, cursor: Cursor) -> Any:
    return and_(
        METRICS.job_id == job_id,
        or_(
            METRICS.attempt > cursor.attempt,
            and_(METRICS.attempt == cursor.attempt, METRICS.epoch > cursor.epoch),
        ),
    )


def _ordered(cursor: Cursor, events: list[Event]) -> list[Event]:
    """By time, the terminal transition last; each event's id is the cursor just after it."""
    out = []
    for event in sorted(events, key=lambda e: (e.terminal, e.at, e.kind != "transition")):
        cursor = cursor.after(event)
        payload = orjson.dumps(event.data).decode()
        out.append(
            Event(event.kind, event.key, event.at, event.data, event.terminal, str(cursor), payload)
        )
    return out


def read_new_events(cursors: Mapping[str, Cursor]) -> dict[str, list[Event]]:
    # No transaction of its own: on SQLite a transaction would take the write lock.
    with read_engine().connect() as conn:
        return read_new(conn, cursors)


@dataclass
class Feed:
    """Every event of one job read so far, shared by all of its subscribers in this process."""

    events: list[Event] = field(default_factory=list)
    cursor: Cursor = field(default_factory=Cursor)
    subscribers: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1].terminal

    def publish(self, events: list[Event]) -> None:
        self.events += events
        self.cursor = Cursor.parse(events[-1].id)
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class EventHub:
    """Per process and event loop: one reading task while anyone is subscribed, woken by
    `push` when it is live and polling every `interval` when it is not."""

    def __init__(
        self,
        interval: float,
        reader: Callable[[Mapping[str, Cursor]], dict[str, list[Event]]] = read_new_events,
        push: Push | None = None,
    ) -> None:
        self.interval, self.reader, self.push = interval, reader, push
        self.feeds: dict[str, Feed] = {}
        self.polls = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def stream(self, job_id: str, after: Cursor) -> AsyncIterator[Event]:
        """The job's events after `after`, live, ending after the terminal transition."""
        feed = self._join(job_id)
        try:
            index = 0
            while True:
                for event in feed.events[index:]:
                    index += 1
                    if not after.seen(event):
                        yield event
                    if event.terminal:
                        return
                await feed.changed.wait()
        finally:
            self._leave(job_id)

    @property
    def subscribers(self) -> int:
        return sum(feed.subscribers for feed in self.feeds.values())

    def _join(self, job_id: str) -> Feed:
        feed = self.feeds.setdefault(job_id, Feed())
        feed.subscribers += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()  # a new subscriber should not wait a whole interval for its backlog
        return feed

    def _leave(self, job_id: str) -> None:
        feed = self.feeds.get(job_id)
        if feed is not None:
            feed.subscribers -= 1
            if feed.subscribers <= 0:
                del self.feeds[job_id]

    def _pushed(self, job_id: str | None) -> None:
        if job_id is None or job_id in self.feeds:
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        pushing = loop.create_task(self.push.run(self._pushed)) if self.push else None
        try:
            while self.feeds:
                self._wake.clear()
                await self._poll_once()
                live = self.push is not None and self.push.live
                interval = max(self.interval, PUSH_FALLBACK_SECONDS) if live else self.interval
                try:
                    await asyncio.wait_for(self._wake.wait(), interval)
                except TimeoutError:
                    pass
        finally:
            if pushing is not None:  # nobody follows a job: no connection is kept listening
                pushing.cancel()

    async def _poll_once(self) -> None:
        cursors = {job: feed.cursor for job, feed in self.feeds.items() if not feed.ended}
        if not cursors:
            return
        try:
            found = await asyncio.to_thread(self.reader, cursors)
        except Exception:  # a DB hiccup: keep the streams open and try again next round
            log.warning("reading job events failed", exc_info=True)
            return
        self.polls += 1
        EVENT_POLLS.inc()
        for job_id, events in found.items():
            feed = self.feeds.get(job_id)
            if feed is not None and events:
                feed.publish(events)


_hubs: dict[asyncio.AbstractEventLoop, EventHub] = {}


def get_hub(interval: float) -> EventHub:
    """The hub of the running event loop (uvicorn has one per process)."""
    loop = asyncio.get_running_loop()
    for stale in [other for other in _hubs if other.is_closed()]:
        del _hubs[stale]
    if loop not in _hubs:
        _hubs[loop] = EventHub(interval, push=push_for(get_settings().sqlalchemy_url))
    return _hubs[loop]
