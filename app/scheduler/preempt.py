"""Preemption: a queued job that fits no free worker stops a running one far below it.

A queued job whose priority is at least `preempt_margin` above a running preemptible job's,
and that no free worker fits, asks the lowest-priority such job on a worker big enough for it
(the most recently started of those: it loses the least) to stop: the job's `preempted_by` is
set, its supervisor sees it at the next lease renewal and asks the training child to stop at
the end of the epoch in flight (the stop path of a cancel). The child checkpoints; the
supervisor re-queues the job (crud.requeue, cause preempted) under the same attempt (not counted
against max_restarts), and its next claim resumes from that epoch (crud.claim_job).

A gang is one job. Running, stopping it frees every seat's worker (its nodes stop together at
the epoch, and rank 0 re-queues it whole). Queued, an N-node job fits no free worker while
fewer than N live free workers fit it: it asks as many victims, in the same order, as free
the workers it lacks (none if all of them would not), and while they stop, a worker they free
takes nothing below it (`making_room`), so the gang gathers instead of the victims coming back.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session, aliased

from app.core.config import Settings
from app.core.db import rows_changed
from app.domain import worker_reads
from app.domain.states import ACTIVE, JobStatus
from app.domain.tables import GangSeat, Job, Worker

log = logging.getLogger(__name__)
CANDIDATES = 20  # queued jobs considered per round, highest priority first


@dataclass(frozen=True)
class Running:
    """A running preemptible job and the GPUs of each worker it holds (a gang: every seat's)."""

    job: Job
    gpus: tuple[int, ...]

    def frees(self, gpus: int) -> int:
        """How many workers with at least `gpus` GPUs stopping it frees."""
        return sum(1 for held in self.gpus if held >= gpus)


def preempt_round(session: Session, settings: Settings) -> int:
    """Ask running jobs to make room for queued ones far above them; how many were asked."""
    workers = worker_reads.live_workers(session, 3 * settings.heartbeat_seconds)
    running = running_jobs(session)
    if not running:
        return 0
    floor = min(r.job.priority for r in running) + settings.preempt_margin
    queued = session.scalars(
        select(Job)
        .where(Job.status == JobStatus.queued, Job.priority >= floor)
        .order_by(Job.priority.desc(), Job.created_at)
        .limit(CANDIDATES)
    ).all()
    asked = 0
    for job in queued:
        # Workers free (or seated in its own forming gang) that fit it, and those on the way.
        free = sum(1 for w in workers if w.gpus >= job.gpus and w.current_job_id in (None, job.id))
        coming = sum(r.frees(job.gpus) for r in running if r.job.preempted_by == job.id)
        victims = pick_victims(job, running, settings.preempt_margin, job.nodes - free - coming)
        chosen = {r.job.id for r in victims if _ask(session, r.job, job)}
        running = [r for r in running if r.job.id not in chosen]
        asked += len(chosen)
    return asked


def running_jobs(session: Session) -> list[Running]:
    """Each running preemptible job with its workers' GPUs: a gang's seats of its attempt, a
    one-node job's worker (a job whose worker row is gone frees nothing, so is left out)."""
    jobs = session.scalars(
        select(Job).where(Job.status == JobStatus.running, Job.preemptible.is_(True))
    ).all()
    held: dict[tuple[str, int | None], list[int]] = defaultdict(list)
    seats = session.execute(
        select(GangSeat.job_id, GangSeat.attempt, Worker.gpus)
        .join(Worker, Worker.name == GangSeat.worker)
        .where(GangSeat.job_id.in_([j.id for j in jobs if j.nodes > 1]))
    )
    for job_id, attempt, gpus in seats:
        held[(job_id, attempt)].append(int(gpus))
    ones = session.execute(
        select(Job.id, Job.attempt, Worker.gpus)
        .join(Worker, Worker.name == Job.worker_name)
        .where(Job.id.in_([j.id for j in jobs if j.nodes <= 1]))
    )
    for job_id, attempt, gpus in ones:
        held[(job_id, attempt)].append(int(gpus))
    running = [Running(j, tuple(held[(j.id, j.attempt)])) for j in jobs]
    return [r for r in running if r.gpus]


def pick_victims(job: Job, running: Sequence[Running], margin: int, lacking: int) -> list[Running]:
    """The running jobs to stop for `job` so that `lacking` more workers fit it: lowest
    priority first, then the latest started; none when they would not free enough."""
    if lacking <= 0:
        return []  # free workers (and those on their way) will take it
    fitting = [
        r
        for r in running
        if r.frees(job.gpus)
        and r.job.priority + margin <= job.priority
        and r.job.preempted_by is None
    ]
    latest = sorted(fitting, key=lambda r: r.job.started_at or r.job.created_at, reverse=True)
    chosen, freed = [], 0
    for victim in sorted(latest, key=lambda r: r.job.priority):  # stable: latest first within
        if freed >= lacking:
            break
        chosen.append(victim)
        freed += victim.frees(job.gpus)
    return chosen if freed >= lacking else []


# From the victims (running jobs, few) to the gang they stop for, by its key: a scan of the
# queue (10,000s of jobs) would cost every claim. Built once: a claim runs it every time.
_GANG = aliased(Job)
_RESERVED = (
    select(func.max(_GANG.priority))
    .select_from(Job)
    .join(_GANG, _GANG.id == Job.preempted_by)
    .where(Job.status.in_(ACTIVE), Job.preempted_by.is_not(None))
    .where(_GANG.status == JobStatus.queued, _GANG.nodes > 1, _GANG.gpus <= bindparam("gpus"))
)


def making_room(session: Session, gpus: int) -> int | None:
    """The priority of the highest queued gang that fits a worker with `gpus` GPUs and has
    running jobs stopping for it, or None: a worker they free takes nothing below it (a
    victim re-queued first would otherwise take its worker back before the gang gathers)."""
    found = session.scalar(_RESERVED, {"gpus": gpus})
    return None if found is None else int(found)


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
