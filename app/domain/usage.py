"""What each key used of the workers: a usage span (a `job_run` row) per attempt's time on a
worker.

crud.add_transition, the one place every status change passes, opens a row when a job starts
running and closes it when the job leaves running (finished, re-queued, preempted, reaped), so
no path can forget it. Fair share (app.scheduler) sums slot-seconds per key in a window.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import case, delete, func, or_, select, update
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.domain.states import ACTIVE, JobStatus
from app.domain.tables import Job, UsageSpan, utcnow


def slots(gpus: int, nodes: int = 1) -> int:
    """What a job holds: its GPUs, or the worker itself for a CPU job, on each of its nodes."""
    return max(gpus, 1) * max(nodes, 1)


def note_transition(session: Session, job_id: str, before: str | None, after: str) -> None:
    """Open a usage span when a job starts running, close it when it leaves running (and
    cancelling)."""
    now = utcnow().timestamp()
    if after == JobStatus.running and before != JobStatus.running:
        job = session.get(Job, job_id)
        if job is not None:
            held = slots(job.gpus, job.nodes)
            session.add(UsageSpan(job_id=job_id, owner_id=job.owner_id, slots=held, started=now))
    elif before in ACTIVE and after not in ACTIVE:
        session.execute(
            update(UsageSpan)
            .where(UsageSpan.job_id == job_id, UsageSpan.ended.is_(None))
            .values(ended=now)
        )


@dataclass(frozen=True)
class KeyUsage:
    """A key's slot-seconds in the window and when it last started a job (None: not in it)."""

    seconds: float
    last_start: datetime | None


def usage(
    session: Session, owners: Iterable[str | None], window_seconds: float, now: datetime
) -> dict[str | None, KeyUsage]:
    """Slot-seconds each owner's attempts spent on workers within the last window_seconds,
    summed by the database (one row per owner)."""
    wanted = list(owners)
    end, since = now.timestamp(), now.timestamp() - window_seconds
    mine = [UsageSpan.owner_id.in_([o for o in wanted if o is not None])]
    if None in wanted:  # jobs stored without a key (an embedded install with auth off)
        mine.append(UsageSpan.owner_id.is_(None))
    until = case(
        (or_(UsageSpan.ended.is_(None), UsageSpan.ended > end), end), else_=UsageSpan.ended
    )
    start = case((UsageSpan.started < since, since), else_=UsageSpan.started)
    rows = session.execute(
        select(
            UsageSpan.owner_id,
            func.sum(UsageSpan.slots * (until - start)),
            func.max(UsageSpan.started),
        )
        .where(or_(*mine), or_(UsageSpan.ended.is_(None), UsageSpan.ended > since))
        .group_by(UsageSpan.owner_id)
    ).all()
    found = {owner: (float(used or 0.0), last) for owner, used, last in rows}
    out = {}
    for owner in wanted:
        used, last = found.get(owner, (0.0, None))
        when = None if last is None else datetime.fromtimestamp(float(last), UTC)
        out[owner] = KeyUsage(max(used, 0.0), when)
    return out


def prune(session: Session, window_seconds: float) -> int:
    """Drop usage spans that ended before the window (no share counts them any more); how many."""
    since = utcnow().timestamp() - window_seconds
    return rows_changed(session, delete(UsageSpan).where(UsageSpan.ended < since))
