"""The claim: a free worker takes the highest-priority queued job that fits it, in SQL.

Whatever job a Celery message names, the worker that receives it runs the job this picks (a
message is a wake-up for a slot): priority, then the keys' fair share, then age. Each message
claims at most one job and every queued job has had one sent, so a job is never lost; the pick
and the claim are one transaction, the pick's row locked FOR UPDATE SKIP LOCKED on PostgreSQL
(two workers pick two jobs) and under SQLite's single-writer lock (BEGIN IMMEDIATE), and the
claim is the conditional UPDATE of crud.claim_job, so a job is never run twice. A multi-node
job is picked only while enough workers are free, and then seats a gang (app.scheduler.gang);
while running jobs stop to make room for a gang, a worker takes nothing below it (preempt).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, literal, null, select
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.domain import crud, scheduler_stats
from app.domain.states import JobStatus
from app.domain.tables import ApiKey, Job, utcnow
from app.domain.usage import usage
from app.scheduler import gang, preempt
from app.scheduler.gang import Rendezvous, TakenSeat
from app.scheduler.policy import Share, fair_order


def claim_next(
    session: Session,
    worker: str,
    gpus: int,
    settings: Settings,
    where: Rendezvous | None = None,
    memory: int | None = None,
) -> Job | TakenSeat | None:
    """Queued -> running for this worker: the job the policy puts first among those that fit;
    a seat in a forming gang before that, and seat 0 of a multi-node job's gang (app.scheduler.
    gang); `where` is this worker's address and port, published with its seat. `memory` is
    this worker's own (None: unknown, any estimate fits): admission measured the job against
    the largest worker's, and a smaller one must leave it to a worker with enough."""
    seat = gang.join_forming(session, worker, gpus, settings, where, memory)
    if seat is not None:
        return seat
    for _ in range(3):  # a pick another worker claimed first (SQLite has no row locks)
        job_id = next_job(session, gpus, settings, utcnow(), memory)
        if job_id is None:
            return None
        if session.scalar(select(Job.nodes).where(Job.id == job_id)) != 1:
            return gang.open_gang(session, job_id, worker, where, settings)
        job = crud.claim_job(session, job_id, worker, settings.lease_seconds)
        if job is not None:
            scheduler_stats.count_wait(session, job.id)
            return job
    return None


def fits(gpus: int, memory: int | None = None) -> list[ColumnElement[bool]]:
    """Queued jobs a worker with `gpus` GPUs (and `memory` bytes, where known) may run."""
    return [Job.status == JobStatus.queued, Job.gpus <= gpus, *gang.within_memory(memory)]


def next_job(
    session: Session, gpus: int, settings: Settings, now: datetime, memory: int | None = None
) -> str | None:
    """The id of the job a free worker with `gpus` GPUs runs next (locked until commit)."""
    where = [*fits(gpus, memory), *gang.admissible(settings, now)]
    reserved = preempt.making_room(session, gpus)
    if reserved is not None:  # a gang's victims are stopping: their workers wait for it
        where.append(Job.priority >= reserved)
    priority = session.scalar(select(func.max(Job.priority)).where(*where))
    while priority is not None:
        found = _at_priority(session, where, priority, settings, now)
        if found is not None:
            return found
        lower = select(func.max(Job.priority)).where(*where, Job.priority < priority)
        priority = session.scalar(lower)
    return None


def _at_priority(
    session: Session,
    where: list[ColumnElement[bool]],
    priority: int,
    settings: Settings,
    now: datetime,
) -> str | None:
    """The oldest job of the key whose turn it is at this priority (None: all taken)."""
    found = heads(session, [*where, Job.priority == priority])
    for share in fair_order(shares(session, found, settings, now), settings.fair_share_tolerance):
        mine = Job.owner_id.is_(None) if share.owner is None else Job.owner_id == share.owner
        oldest = (
            select(Job.id)
            .where(*where, Job.priority == priority, mine)
            .order_by(Job.created_at, Job.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        job_id = session.scalar(oldest)
        if job_id is not None:
            return str(job_id)
    return None


def heads(session: Session, level: list[ColumnElement[bool]]) -> list[tuple[Any, ...]]:
    """(key, its oldest job, its weight) of each key with jobs in `level`, in one statement: a
    skip scan of the queue index (one probe per key, not a pass over every queued job), then
    the jobs stored without a key (weight 1)."""
    walk = select(func.min(Job.owner_id).label("owner")).where(*level).cte("keys", recursive=True)
    after = select(func.min(Job.owner_id)).where(*level, Job.owner_id > walk.c.owner)
    walk = walk.union_all(select(after.scalar_subquery()).where(walk.c.owner.is_not(None)))
    oldest = select(func.min(Job.created_at)).where(*level, Job.owner_id == walk.c.owner)
    keyed = (
        select(walk.c.owner, oldest.scalar_subquery(), func.coalesce(ApiKey.share_weight, 1.0))
        .outerjoin(ApiKey, ApiKey.id == walk.c.owner)
        .where(walk.c.owner.is_not(None))
    )
    first = func.min(Job.created_at)
    keyless = (
        select(null().cast(Job.owner_id.type), first, literal(1.0))
        .where(*level, Job.owner_id.is_(None))
        .having(first.is_not(None))
    )
    return [tuple(row) for row in session.execute(keyed.union_all(keyless))]


def shares(
    session: Session, heads: Sequence[Any], settings: Settings, now: datetime
) -> list[Share]:
    """Each competing key's usage in the window, weight, last start and oldest queued job."""
    used = usage(session, [owner for owner, _, _ in heads], settings.fair_share_window_seconds, now)
    return [
        Share(owner, used[owner].seconds, float(weight), used[owner].last_start, oldest)
        for owner, oldest, weight in heads
    ]
