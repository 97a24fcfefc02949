"""The live workers, and why a queued job is not on one yet, in words a user can act on."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.cost import gigabytes
from app.domain.states import JobStatus
from app.domain.tables import Job, Worker, utcnow


def live_workers(session: Session, within_seconds: float) -> Sequence[Worker]:
    """Workers whose heartbeat is fresh."""
    horizon = utcnow() - timedelta(seconds=within_seconds)
    return session.scalars(select(Worker).where(Worker.heartbeat_at >= horizon)).all()


def wait_reason(session: Session, job: Job, within_seconds: float) -> str | None:
    """Why a queued job has not started, in words a user can act on."""
    if job.status != JobStatus.queued:
        return None
    return wait_reason_among(job, live_workers(session, within_seconds))


def wait_reason_among(job: Job, workers: Sequence[Worker]) -> str:
    """wait_reason of a queued job, given the live workers."""
    if not workers:
        return "waiting for a worker: none is live"
    largest = max(w.gpus for w in workers)
    if largest < job.gpus:
        return f"waiting for a worker with ≥ {job.gpus} GPUs; largest live worker has {largest}"
    fitting = [w for w in workers if w.gpus >= job.gpus]
    needed = job.memory_bytes
    if needed is not None:  # the claim leaves the job to a worker with its estimate's memory
        roomy = [w for w in fitting if w.memory_bytes is None or w.memory_bytes >= needed]
        if not roomy:
            most = max(w.memory_bytes or 0 for w in fitting)
            return (
                f"waiting for a worker with ≥ {gigabytes(needed)} of memory (the job's "
                f"estimate); the largest live worker that fits has {gigabytes(most)}"
            )
        fitting = roomy
    free = sum(1 for w in fitting if w.current_job_id is None)
    if job.nodes > 1 and free < job.nodes:
        return f"waiting for {job.nodes} free workers at once (a gang); {free} free"
    if not free:
        return "waiting for a free worker: every worker that fits is busy"
    return "waiting to be picked up"
