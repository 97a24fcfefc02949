"""Live job events (for SSE): one reader per API process fans database changes out to subscribers.

The worker and the training child write transitions and metrics rows to the database, the source
of truth in every deployment; the API streams them. However many clients follow a job, each API
process reads the database once per wake-up for all the jobs being followed
(app.services.event_reads), then hands the new events to every subscriber in memory. The
database wakes it when something was committed (app.services.event_push: LISTEN/NOTIFY on
PostgreSQL, the data version on SQLite); a poll at `interval` remains for while that is not
live, and a slow one as a safety net.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from app.core.config import get_settings
from app.observability.telemetry import EVENT_POLLS
from app.services.event_push import Push, push_for
from app.services.event_reads import Cursor, Event, Reader, read_new_events, read_new_events_async

__all__ = ["Cursor", "Event", "EventHub", "get_hub", "read_new_events"]

log = logging.getLogger(__name__)
# While the database pushes, the hub still reads this often (a safety net, not the way in).
PUSH_FALLBACK_SECONDS = 5.0


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
        reader: Reader = read_new_events_async,
        push: Push | None = None,
    ) -> None:
        self.interval, self.reader, self.push = interval, reader, push
        self.feeds: dict[str, Feed] = {}
        self.polls = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def stream(
        self, job_id: str, after: Cursor, keepalive: float | None = None
    ) -> AsyncGenerator[Event | None, None]:
        """The job's events after `after`, live, ending after the terminal transition; None
        after each `keepalive` seconds without one (a stream's ping)."""
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
                try:
                    async with asyncio.timeout(keepalive):
                        await feed.changed.wait()
                except TimeoutError:
                    yield None
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
            if inspect.iscoroutinefunction(self.reader):
                found = await self.reader(cursors)
            else:  # a blocking reader (a test's): off the loop
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
