"""A job's events as the live stream sends them: the resume cursor, the event with its SSE bytes,
and the reads of what is new after each followed job's cursor (app.services.live_events fans
them out).

An event id is a cursor "T.A.E": the last transition id and the (attempt, epoch) of the last
metrics row a client has seen. A client that reconnects with Last-Event-ID gets exactly what it
missed, including epochs that a resumed attempt wrote again after a lost worker.
"""

from __future__ import annotations

import asyncio
import re
from collections import namedtuple
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import and_, or_, select
from sqlalchemy.engine import Connection

from app.core.async_db import fetch_sql
from app.core.db import read_engine
from app.domain.redact import without_hosts
from app.domain.states import TERMINAL
from app.domain.tables import EpochMetric, JobTransition
from app.schemas.metric_row import METRIC_FIELDS

CURSOR = re.compile(r"^(\d{1,18})\.(\d{1,9})\.(\d{1,9})$")
TRANSITIONS = JobTransition.__table__.c
METRICS = EpochMetric.__table__.c
TransitionRow = namedtuple("TransitionRow", [c.name for c in TRANSITIONS])  # type: ignore[misc]
# A stored epoch_metric row (every column), as the PostgreSQL read hands it over.
EpochRow = namedtuple("EpochRow", [c.name for c in METRICS])  # type: ignore[misc]

# On PostgreSQL the same reads as `read_new`, as one text whatever the number of jobs: the
# cursors travel as arrays, so psycopg prepares the statement once and no OR of per-job clauses
# is built, compiled and parsed on every wake-up (that cost the hub more than the fan-out).
_CURSORS = "unnest(%(jobs)s::text[], %(transitions)s::bigint[], %(attempts)s::int[], "
_CURSORS += "%(epochs)s::int[]) AS c(job_id, transition, attempt, epoch)"
TRANSITIONS_AFTER_SQL = (
    f"SELECT {', '.join('t.' + c.name for c in TRANSITIONS)} FROM job_transition t "
    f"JOIN {_CURSORS} ON t.job_id = c.job_id AND t.id > c.transition ORDER BY t.id"
)
ROWS_AFTER_SQL = (
    f"SELECT {', '.join('m.' + c.name for c in METRICS)} FROM epoch_metric m "
    f"JOIN {_CURSORS} ON m.job_id = c.job_id AND (m.attempt, m.epoch) > (c.attempt, c.epoch) "
    "ORDER BY m.attempt, m.epoch"
)


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
    wire: bytes = b""  # the SSE message, written once however many subscribers send it


def _transition_event(row: Any) -> Event:
    at = row.at.astimezone(UTC)  # psycopg's own rows are in the session's time zone
    data = {
        "job_id": row.job_id,
        "from_status": row.from_status,
        "to_status": row.to_status,
        # One message for every subscriber, admins too: workers' hosts as /v1/workers shows them
        "reason": without_hosts(row.reason),
        "attempt": row.attempt,
        "at": at.isoformat(),
    }
    return Event("transition", (row.id,), at, data, terminal=row.to_status in TERMINAL)


def _epoch_event(row: Any) -> Event:
    recorded_at = row.recorded_at.astimezone(UTC)
    data = {"job_id": row.job_id, "epoch": row.epoch, "attempt": row.attempt}
    data |= {name: getattr(row, name) for name in METRIC_FIELDS}
    data["recorded_at"] = recorded_at.isoformat()
    return Event("epoch", (row.attempt, row.epoch), recorded_at, data)


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
    return _by_job(cursors, transitions, rows)


def _by_job(
    cursors: Mapping[str, Cursor], transitions: Sequence[Any], rows: Sequence[Any]
) -> dict[str, list[Event]]:
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
        # JSON on one line, so one `data:` line (the order of FastAPI's SSE encoder).
        wire = b"event: %s\ndata: %s\nid: %s\n\n" % (
            event.kind.encode(),
            orjson.dumps(event.data),
            str(cursor).encode(),
        )
        out.append(
            Event(event.kind, event.key, event.at, event.data, event.terminal, str(cursor), wire)
        )
    return out


def read_new_events(cursors: Mapping[str, Cursor]) -> dict[str, list[Event]]:
    # No transaction of its own: on SQLite a transaction would take the write lock.
    with read_engine().connect() as conn:
        return read_new(conn, cursors)


async def read_new_events_async(cursors: Mapping[str, Cursor]) -> dict[str, list[Event]]:
    """`read_new_events` on the event loop on PostgreSQL (no thread); on SQLite in a thread."""
    if not cursors:
        return {}
    jobs = list(cursors)
    params = {
        "jobs": jobs,
        "transitions": [cursors[job].transition for job in jobs],
        "attempts": [cursors[job].attempt for job in jobs],
        "epochs": [cursors[job].epoch for job in jobs],
    }
    # Transitions first, as in read_new: a terminal one visible means all its rows are.
    found = await fetch_sql([(TRANSITIONS_AFTER_SQL, params), (ROWS_AFTER_SQL, params)])
    if found is None:
        return await asyncio.to_thread(read_new_events, cursors)
    transitions, rows = found
    return _by_job(cursors, [TransitionRow(*r) for r in transitions], [EpochRow(*r) for r in rows])


Found = dict[str, list[Event]]
Reader = Callable[[Mapping[str, Cursor]], Found | Awaitable[Found]]
