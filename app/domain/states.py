"""Job statuses, stop reasons and error codes: every name, once (pure stdlib).

They are StrEnums, so a member equals its string: the database columns, the JSON of the API
and of the outcome file hold the plain values. The training core imports this module too.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """Where a job is in its life (the `status` column)."""

    queued = "queued"
    running = "running"
    cancelling = "cancelling"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})
ACTIVE = frozenset({JobStatus.running, JobStatus.cancelling})


# The reason of the running -> queued transition a preemption writes (app.scheduler); such a
# re-queue is nobody's failure: it does not count against max_restarts or change `attempt`.
PREEMPTED = "preempted"


class RequeueCause(StrEnum):
    """Why a running job goes back to the queue (app.domain.crud.requeue, one for all)."""

    lost = "lost"  # its worker's lease ran out (the reaper), within max_restarts
    failed = "failed"  # a retryable failure within max_restarts, a gang's lost rank among them
    shutdown = "shutdown"  # its worker is shutting down: it stopped at a checkpoint
    preempted = "preempted"  # a higher-priority job asked it to stop: same attempt, resumes


def requeue_reason(
    cause: RequeueCause, detail: str | None, attempt: int, for_job: str | None
) -> str:
    """The running -> queued transition's reason: `detail` is the cause's own word (a failure's
    error code, a stop's error); `for_job` the job a preemption made room for."""
    if cause == RequeueCause.lost:
        return f"worker lost (lease expired), attempt {attempt}"
    if cause == RequeueCause.failed:
        return f"attempt {attempt} failed ({detail}); retrying"
    if cause == RequeueCause.shutdown:
        return f"worker shutting down; re-queued ({detail or ErrorCode.worker_shutdown})"
    return f"{PREEMPTED} for job {for_job}: {detail or 'stopped'}; resumes from there"


class SweepStatus(StrEnum):
    """running: launching trials; the rest are final (finished_at is set once no trial runs)."""

    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


class TrialState(StrEnum):
    """A sweep trial as its job shows it (GET /v1/sweeps/{id})."""

    queued = "queued"
    running = "running"
    complete = "complete"
    pruned = "pruned"
    failed = "failed"
    cancelled = "cancelled"


class StopReason(StrEnum):
    """Why training stopped (the `stop_reason` column)."""

    completed = "completed"
    early_stopping = "early_stopping"
    cancelled = "cancelled"
    timeout = "timeout"
    error = "error"
    non_finite_loss = "non_finite_loss"
    worker_lost = "worker_lost"
    queue_timeout = "queue_timeout"
    pruned = "pruned"  # a sweep's pruner ended the trial (the job succeeds)
    disk_full = "disk_full"  # a checkpoint or model write found no space left (final)
    shutdown = "shutdown"  # the worker is shutting down: checkpoint, then re-queue (internal)
    preempted = "preempted"  # a higher-priority job needs the worker: stop at the epoch, re-queue


class ErrorCode(StrEnum):
    """What went wrong with a failed job (the `error_code` column; worker.protocol retries
    the ones a new attempt could fix)."""

    worker_lost = "worker_lost"
    infrastructure = "infrastructure"
    child_killed = "child_killed"
    child_crashed = "child_crashed"
    non_finite_loss = "non_finite_loss"
    invalid_data = "invalid_data"
    invalid_config = "invalid_config"
    out_of_memory = "out_of_memory"
    timeout = "timeout"
    queue_timeout = "queue_timeout"
    internal_error = "internal_error"
    worker_shutdown = "worker_shutdown"
    preempted = "preempted"  # stopped for a higher-priority job; re-queued, not a failure
    disk_full = "disk_full"
