"""Writes an attempt's end: what the child reported or how it died, a gang's settling (rank 0)
or its seat's end (another node), a retryable failure re-queued (or retried), else the final
status, then what the attempt left on disk, and the next trial of its sweep."""

from __future__ import annotations

import logging
import signal

from app.core.config import Settings
from app.core.db import retrying, session_scope
from app.domain import crud, retention
from app.domain.states import ErrorCode, JobStatus, RequeueCause, StopReason
from app.services import sweeps
from app.services.publish import publish_queued
from worker.protocol import Outcome, read_outcome
from worker.supervisor import gang_seat, memory_limit, shutdown
from worker.supervisor.attempt import Attempt, note

log = logging.getLogger(__name__)


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
        if outcome.error_code == ErrorCode.preempted and crud.requeue(
            session, job, RequeueCause.preempted, outcome.error
        ):
            session.commit()
            publish_queued(session, job)  # a wake-up for the slot it will resume on
            return None
        if outcome.retryable and job.status == JobStatus.cancelling:
            outcome = Outcome.stopped(StopReason.cancelled, outcome.error)
        elif outcome.retryable and attempt <= job.max_restarts:
            if crud.requeue(session, job, RequeueCause.failed, outcome.error_code):
                session.commit()
                publish_queued(session, job)
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


def outcome_of(attempt: Attempt) -> Outcome:
    """The child's own report, or what its death tells us."""
    reported = read_outcome(attempt.files, attempt.number)
    over = attempt.limit is not None and attempt.limit[0].tripped()
    if over and (reported is None or reported.status == JobStatus.failed):
        assert attempt.limit is not None
        return memory_limit.outcome(*attempt.limit)  # the limit killed it (or one of its ranks)
    if reported is not None:
        return reported
    code = attempt.process.returncode
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    if attempt.stop_reason in (StopReason.shutdown, StopReason.preempted):  # its checkpoint stands
        ended = f"the training process was ended while stopping ({attempt.stop_reason}, {how})"
        return Outcome.stopped(attempt.stop_reason, ended)
    if attempt.stop_reason is not None:  # it died after (or instead of) honouring a stop request
        ended = f"the training process did not stop in time and was ended ({how})"
        return Outcome.stopped(attempt.stop_reason, ended)
    if code == -signal.SIGKILL and attempt.killed_at is None and attempt.memory.killed_by_oom():
        return attempt.memory.outcome()  # a SIGKILL we did not send, near the memory limit
    if code < 0:
        return Outcome.failure(
            ErrorCode.child_killed, f"the training process died ({how}); see the log"
        )
    return Outcome.failure(
        ErrorCode.child_crashed,
        f"the training process exited without a result ({how}); see the log",
    )


def record_end(settings: Settings, attempt: Attempt) -> None:
    if attempt.lost:
        log.warning(
            "job %s attempt %s: lease lost; leaving the job", attempt.job_id, attempt.number
        )
        _ship_rest(attempt)
        return
    if attempt.formed is not None and attempt.formed.node.rank:  # rank 0 writes the gang's end
        note(attempt, f"ended: exit code {attempt.process.returncode}")
        _ship_rest(attempt)
        gang_seat.end_seat(attempt.formed, clean=attempt.process.returncode == 0)
        return
    outcome = outcome_of(attempt)
    if attempt.formed is not None:
        outcome = gang_seat.settle(settings, attempt.formed, outcome, attempt.broken)
    note(attempt, f"ended: {outcome.status} ({outcome.error_code or outcome.stop_reason})")
    _ship_rest(attempt)  # before the end is recorded: who sees the end can read why
    # Bounded by one lease, then the reaper decides; a try whose commit was lost and landed
    # finds the attempt ended, and the fenced writes change nothing.
    within = settings.lease_seconds
    retrying(lambda: record(settings, attempt.job_id, attempt.number, outcome), within, "job end")
    if attempt.formed is not None:
        gang_seat.release(attempt.formed)


def _ship_rest(attempt: Attempt) -> None:
    """A shipping node's last lines (its end among them) go to the database before it leaves."""
    if attempt.shipper is not None:
        attempt.shipper.ship(final=True)
