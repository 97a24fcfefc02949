"""The queue as the scheduler sees it (GET /v1/queue)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import func, select

from app.api.deps import CurrentKey, SessionDep
from app.domain.job_reads import STANDING_FIELDS, waiting
from app.domain.states import JobStatus
from app.domain.tables import Job, StoredStanding
from app.schemas.queue import QueueCount, QueueEntry, QueuePublic

UNPLACED = 1 << 62  # a job whose standing is not worked out yet lists last

router = APIRouter(prefix="/queue", tags=["queue"])


@router.get("", response_model=QueuePublic, operation_id="read_queue")
def read_queue(
    session: SessionDep, key: CurrentKey, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> QueuePublic:
    """Own queued jobs in full with position, reason and ETA (an admin: everyone's, with their
    keys); others' as counts per priority, their keys not named. The standings are those the
    scheduler stored (app.scheduler.standings), as each job's own read shows them."""
    queued = [Job.status == JobStatus.queued]
    mine = [] if key.is_admin else [Job.owner_id == key.id]
    rows = session.execute(
        select(Job, StoredStanding)
        .outerjoin(StoredStanding, StoredStanding.job_id == Job.id)
        .where(*queued, *mine)
        .order_by(Job.priority.desc(), Job.created_at)
        .limit(limit + 1)
    ).all()
    entries = [_entry(job, stored) for job, stored in rows[:limit]]
    others: list[QueueCount] = []
    if not key.is_admin:  # an admin's own list has every job; others' keys are not named
        counts = session.execute(
            select(Job.priority, func.count())
            .where(*queued, Job.owner_id.is_distinct_from(key.id))
            .group_by(Job.priority)
            .order_by(Job.priority.desc())
        ).all()
        others = [QueueCount(priority=p, jobs=n) for p, n in counts]
    total = session.scalar(select(func.count()).select_from(Job).where(*queued))
    return QueuePublic(
        jobs=sorted(entries, key=lambda e: (e.position or UNPLACED, e.created_at)),
        others=others,
        queued=int(total or 0),
        truncated=len(rows) > limit,
    )


def _entry(job: Job, stored: StoredStanding | None) -> QueueEntry:
    """A job of the queue with the standing the scheduler stored (the job's own read shows the
    same: app.domain.job_reads.waiting)."""
    found = None
    if stored is not None:
        found = {name: getattr(stored, name) for name in STANDING_FIELDS}
    place = waiting(job.status, found)["queue"]
    return QueueEntry(
        id=job.id,
        name=job.name,
        owner_id=job.owner_id,
        priority=job.priority,
        gpus=job.gpus,
        created_at=job.created_at,
        **place,
    )
