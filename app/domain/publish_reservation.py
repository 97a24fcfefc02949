"""A queued job's (re)publish, reserved by one process per round (app.services.publish).

The reservation is a conditional UPDATE of the job's `dispatched_at` stamp, so two processes
that both see the job queued cannot both send its message."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.core.db import rows_changed
from app.domain.states import JobStatus
from app.domain.tables import Job, utcnow


def reserve_publish(session: Session, job: Job) -> bool:
    """Reserve a queued job's (re)publish for this process; one process wins per round."""
    before, stamp = job.dispatched_at, utcnow()
    condition = Job.dispatched_at.is_(None) if before is None else Job.dispatched_at == before
    claimed = rows_changed(
        session,
        update(Job)
        .where(Job.id == job.id, Job.status == JobStatus.queued, condition)
        .values(dispatched_at=stamp),
    )
    if claimed:  # remember our stamp (without a second write) so release_publish can match it
        set_committed_value(job, "dispatched_at", stamp)
    return bool(claimed)


def release_publish(session: Session, job: Job) -> None:
    """Undo reserve_publish after a publish that failed (only if nobody sent it since)."""
    session.execute(
        update(Job)
        .where(Job.id == job.id, Job.dispatched_at == job.dispatched_at)
        .values(dispatched_at=None)
    )
