"""Preemption: a queued job that fits no free worker stops a running one far below it.

A queued job whose priority is at least `preempt_margin` above a running preemptible job's,
and that no free worker fits, asks the lowest-priority such job on a worker big enough for it
(the most recently started of those: it loses the least) to stop: the job's `preempted_by` is
set, its supervisor sees it at the next lease renewal and asks the training child to stop at
the end of the epoch in flight (the stop path of a cancel). The child checkpoints; the
supervisor re-queues the job with a `preempted` transition under the same attempt (not counted
against max_restarts), and its next claim resumes from that epoch (crud.claim_job).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import rows_changed
from app.domain import crud
from app.domain.states import ACTIVE, PREEMPTED, JobStatus
from app.domain.tables import Job, Worker
from app.scheduler import stats

log = logging.getLogger(__name__)
CANDIDATES = 20  # queued jobs considered per round, highest priority first


def preempt_round(session: Session, settings: Settings) -> int:
    """Ask running jobs to make room for queued ones far above them; how many were asked."""
    workers = crud.live_workers(session, 3 * settings.heartbeat_seconds)
    rows = session.execute(
        select(Job, Worker.gpus)
        .join(Worker, Worker.name == Job.worker_name)
        .where(Job.status == JobStatus.running, Job.preemptible.is_(True))
    ).all()
    running: list[tuple[Job, int]] = [(job, int(gpus)) for job, gpus in rows]
    if not running:
        return 0
    floor = min(job.priority for job, _ in running) + settings.preempt_margin
    queued = session.scalars(
        select(Job)
        .where(Job.status == JobStatus.queued, Job.priority >= floor)
        .order_by(Job.priority.desc(), Job.created_at)
        .limit(CANDIDATES)
    ).all()
    asked = 0
    for job in queued:
        if any(w.gpus >= job.gpus and w.current_job_id is None for w in workers):
            continue  # a free worker will take it
        if _already_asked(session, job.id):
            continue
        victim = pick_victim(job, running, settings.preempt_margin)
        if victim is not None and _ask(session, victim, job):
            running = [(j, g) for j, g in running if j.id != victim.id]
            asked += 1
    return asked


def pick_victim(job: Job, running: Sequence[tuple[Job, int]], margin: int) -> Job | None:
    """The running job to stop for `job`: lowest priority, then the latest started."""
    fitting = [
        j
        for j, gpus in running
        if gpus >= job.gpus and j.priority + margin <= job.priority and j.preempted_by is None
    ]
    latest = sorted(fitting, key=lambda j: j.started_at or j.created_at, reverse=True)
    return min(latest, key=lambda j: j.priority, default=None)


def _already_asked(session: Session, job_id: str) -> bool:
    """A running job is stopping for this one already."""
    query = select(Job.id).where(Job.preempted_by == job_id, Job.status.in_(ACTIVE)).limit(1)
    return session.scalar(query) is not None


def _ask(session: Session, victim: Job, job: Job) -> bool:
    """Mark the victim (one conditional UPDATE, so many processes ask once), committed."""
    marked = rows_changed(
        session,
        update(Job)
        .where(Job.id == victim.id, Job.status == JobStatus.running, Job.preempted_by.is_(None))
        .values(preempted_by=job.id),
    )
    session.commit()
    if marked:
        log.info(
            "asked job %s (priority %d) to stop at its epoch for job %s (priority %d)",
            victim.id,
            victim.priority,
            job.id,
            job.priority,
        )
    return bool(marked)


def requeue(session: Session, job: Job, detail: str | None) -> bool:
    """Running -> queued after a preemption stop, under the same attempt; False if not ours."""
    moved = rows_changed(
        session,
        update(Job)
        .where(
            Job.id == job.id,
            Job.attempt == job.attempt,
            Job.status == JobStatus.running,
            Job.preempted_by.is_not(None),
        )
        .values(
            status=JobStatus.queued,
            lease_expires_at=None,
            worker_name=None,
            dispatched_at=None,
            step_progress=None,
        ),
    )
    if moved:
        why = f"{PREEMPTED} for job {job.preempted_by}: {detail or 'stopped'}; resumes from there"
        crud.add_transition(session, job.id, JobStatus.running, JobStatus.queued, why, job.attempt)
        stats.count_preemption(session)
    return bool(moved)
