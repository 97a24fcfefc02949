"""A Celery message is a wake-up for this worker's slot (app.scheduler.claim): claim the job
the scheduler puts first, and when that is not the message's own job, publish that job a wake-up
again, so each queued job keeps a message on its way to a worker that fits it (a worker
bigger than it needs may have used it for another job)."""

from __future__ import annotations

import logging

from sqlalchemy.exc import OperationalError

from app.core.config import Settings
from app.core.db import session_scope
from app.domain.cost import host_memory_bytes
from app.domain.tables import Job
from app.scheduler import standings
from app.scheduler.claim import claim_next
from app.scheduler.gang import TakenSeat
from app.services.publish import republish
from worker.supervisor import gang_port, gang_seat
from worker.supervisor.claimed import Claim, Claimed

log = logging.getLogger(__name__)


def claim(settings: Settings, worker_name: str) -> Claim | None:
    """The attempt this worker just claimed, or its seat in a multi-node job's gang (it
    opened the gang, seat 0: the other seats get wake-ups now)."""
    where, holder = gang_seat.rendezvous(settings)  # the port stays held if a seat publishes it
    claimed: Claimed | None = None
    seat: TakenSeat | None = None
    try:
        with session_scope() as session:
            gpus = len(settings.worker_gpu_ids)
            job = claim_next(session, worker_name, gpus, settings, where, host_memory_bytes())
            seat = job if isinstance(job, TakenSeat) else None
            if isinstance(job, Job):
                assert job.started_at is not None  # a claim sets it
                claimed = Claimed(job.id, job.attempt, job.spec, job.started_at, job.memory_bytes)
    except BaseException:
        holder.close()
        raise
    if seat is None:
        holder.close()
    else:
        gang_port.keep(seat.job_id, holder)
    if claimed is not None:
        standings.refresh(settings)  # the jobs behind the one it took moved up
        return claimed
    if seat is not None and seat.rank == 0:
        gang_seat.publish_others(seat.job_id, seat.nodes)
    return seat


def try_republish(job_id: str) -> None:
    """A wake-up for a job still queued whose message another job's claim used: each queued job
    keeps a message on its way to a worker that fits it (a bigger worker may have taken it)."""
    try:
        republish(job_id)
    except OperationalError:  # the reconciler publishes it later (RELIABILITY.md P7)
        log.warning("could not re-publish job %s's wake-up", job_id, exc_info=True)
