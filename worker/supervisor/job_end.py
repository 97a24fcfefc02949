"""Writes an attempt's end: a retryable failure re-queued (or retried), else the final status,
then what the attempt left on disk, and the next trial of its sweep."""

from __future__ import annotations

from app.core.config import Settings
from app.core.db import session_scope
from app.domain import crud, retention
from app.domain.states import ErrorCode, JobStatus, StopReason
from app.scheduler import preempt
from app.services import sweeps
from app.services.dispatch import dispatch
from worker.protocol import Outcome
from worker.supervisor import shutdown


def record(settings: Settings, job_id: str, attempt: int, outcome: Outcome) -> None:
    """Write the attempt's end; a sweep's trial that ended lets its sweep queue the next."""
    sweep_id = _record(settings, job_id, attempt, outcome)
    with session_scope() as session:  # what the attempt left on disk counts in the key's quota
        retention.record_disk(session, settings.resolved_artifacts_dir, job_id)
    if sweep_id is not None:
        sweeps.trial_ended(sweep_id)


def _record(settings: Settings, job_id: str, attempt: int, outcome: Outcome) -> str | None:
    """Re-queue a retryable failure, else write the final status (and say the job's sweep)."""
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        if job is None or job.attempt != attempt or shutdown.requeue(session, job, outcome):
            return None
        if outcome.error_code == ErrorCode.preempted and preempt.requeue(
            session, job, outcome.error
        ):
            session.commit()
            dispatch(session, job)  # a wake-up for the slot it will resume on
            return None
        if outcome.retryable and job.status == JobStatus.cancelling:
            outcome = Outcome.stopped(StopReason.cancelled, outcome.error)
        elif outcome.retryable and attempt <= job.max_restarts:
            reason = f"attempt {attempt} failed ({outcome.error_code}); retrying"
            if crud.requeue(session, job, reason):
                session.commit()
                dispatch(session, job)
                return None
        elif outcome.retryable:
            outcome.error = f"{outcome.error} (attempt {attempt}; max_restarts reached)"
        crud.finish_job(
            session,
            job_id,
            attempt,
            outcome.status,
            stop_reason=outcome.stop_reason,
            reason=f"attempt {attempt}: {outcome.stop_reason}",
            error_code=outcome.error_code,
            error=outcome.error,
            result=outcome.result or None,
        )
        return job.sweep_id
