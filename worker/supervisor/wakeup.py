"""A Celery message is a wake-up for this worker's slot (app.scheduler.claim): claim the job
the scheduler puts first, and when that is not the message's own job, send that job a wake-up
again, so each queued job keeps a message on its way to a worker that fits it (a worker
bigger than it needs may have used it for another job)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy.exc import OperationalError

from app.core.config import Settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.states import JobStatus
from app.scheduler.claim import claim_next
from app.services.dispatch import dispatch

log = logging.getLogger(__name__)


def claim(settings: Settings, worker_name: str) -> tuple[str, int, Any, datetime] | None:
    """(job id, attempt, stored spec, first start) of the attempt this worker just claimed."""
    with session_scope() as session:
        gpus = len(settings.worker_gpu_ids)
        job = claim_next(session, worker_name, gpus, settings)
        if job is None:
            return None
        assert job.started_at is not None  # a claim sets it
        return job.id, job.attempt, job.spec, job.started_at


def resend(job_id: str) -> None:
    """A wake-up for a job still queued whose message another job's claim used: each queued job
    keeps a message on its way to a worker that fits it (a bigger worker may have taken it)."""
    try:
        with session_scope() as session:
            job = crud.get_job(session, job_id)
            if job is not None and job.status == JobStatus.queued:
                dispatch(session, job)
    except OperationalError:  # the reconciler sends it later (RELIABILITY.md P7)
        log.warning("could not re-send job %s's wake-up", job_id, exc_info=True)
