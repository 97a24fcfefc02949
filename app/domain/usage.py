"""What each key used of the workers: one `job_run` row per attempt's time on a worker.

crud.add_transition, the one place every status change passes, opens a row when a job starts
running and closes it when the job leaves running (finished, re-queued, preempted, reaped), so
no path can forget it. Fair share (app.scheduler) sums slot-seconds per key in a window.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.domain.states import ACTIVE, JobStatus
from app.domain.tables import Job, JobRun, utcnow


def slots(gpus: int) -> int:
    """What a job holds of a worker: its GPUs, or the worker itself for a CPU job."""
    return max(gpus, 1)


def note_transition(session: Session, job_id: str, before: str | None, after: str) -> None:
    """Open a run when a job starts running, close it when it leaves running (and cancelling)."""
    if after == JobStatus.running and before != JobStatus.running:
        job = session.get(Job, job_id)
        if job is not None:
            session.add(JobRun(job_id=job_id, owner_id=job.owner_id, slots=slots(job.gpus)))
    elif before in ACTIVE and after not in ACTIVE:
        session.execute(
            update(JobRun)
            .where(JobRun.job_id == job_id, JobRun.ended_at.is_(None))
            .values(ended_at=utcnow())
        )


@dataclass(frozen=True)
class KeyUsage:
    """A key's slot-seconds in the window and when it last started a job (None: not in it)."""

    seconds: float
    last_start: datetime | None


def usage(
    session: Session, owners: Iterable[str | None], window_seconds: float, now: datetime
) -> dict[str | None, KeyUsage]:
    """Slot-seconds each owner's attempts spent on workers within the last window_seconds."""
    wanted = list(owners)
    since = now - timedelta(seconds=window_seconds)
    mine = [JobRun.owner_id.in_([o for o in wanted if o is not None])]
    if None in wanted:  # jobs stored without a key (an embedded box with auth off)
        mine.append(JobRun.owner_id.is_(None))
    rows = session.execute(
        select(JobRun.owner_id, JobRun.slots, JobRun.started_at, JobRun.ended_at).where(
            or_(*mine), or_(JobRun.ended_at.is_(None), JobRun.ended_at > since)
        )
    ).all()
    seconds: dict[str | None, float] = dict.fromkeys(wanted, 0.0)
    last: dict[str | None, datetime | None] = dict.fromkeys(wanted)
    for owner, held, started, ended in rows:
        span = (min(ended or now, now) - max(started, since)).total_seconds()
        seconds[owner] += held * max(span, 0.0)
        last[owner] = started if last[owner] is None else max(last[owner], started)  # type: ignore[type-var]
    return {o: KeyUsage(seconds[o], last[o]) for o in wanted}


def prune(session: Session, window_seconds: float) -> int:
    """Drop runs that ended before the window (no share counts them any more); how many."""
    since = utcnow() - timedelta(seconds=window_seconds)
    return rows_changed(session, delete(JobRun).where(JobRun.ended_at < since))
