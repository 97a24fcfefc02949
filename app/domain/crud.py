"""The job state machine and a job's rows; every status change goes through here.

Changes that race (claim, cancel, finish, reap) are one conditional UPDATE each, so the
database decides who wins whatever the broker redelivers (RELIABILITY.md P10). Reads and
checks that change no status are beside it: job_reads, worker_reads, key_jobs,
publish_reservation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.domain import scheduler_stats
from app.domain.admission import Admitted, admit
from app.domain.keys import caller_of
from app.domain.redact import without_server_paths
from app.domain.states import (
    ACTIVE,
    TERMINAL,
    ErrorCode,
    JobStatus,
    RequeueCause,
    StopReason,
    requeue_reason,
)
from app.domain.tables import Job, JobTransition, utcnow
from app.domain.usage import note_transition
from app.schemas.job_spec import JobSpec


class Conflict(Exception):
    """The job is not in a state that allows the change."""


def create_job(
    session: Session,
    spec: JobSpec,
    queue: str,
    *,
    owner_id: str | None = None,
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    disk_bytes: int | None = None,
    admitted: Admitted | None = None,
) -> Job:
    """Store a new queued job (the caller commits before it is sent to the broker), with its
    model's summary for the data it names and its memory estimate: from `admitted`, the
    submit's admission of this spec, else admitted here."""
    if admitted is None:
        admitted = admit(session, spec, caller_of(session, owner_id) if owner_id else None)
    job = Job(
        disk_bytes=disk_bytes,
        memory_bytes=admitted.memory_bytes,
        model_summary=admitted.summary,
        owner_id=owner_id,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        name=spec.name,
        framework=spec.framework,
        spec=spec.model_dump(mode="json"),
        queue=queue,
        gpus=spec.resources.gpus,
        nodes=spec.resources.nodes,
        max_restarts=spec.max_restarts,
        priority=spec.priority,
        preemptible=spec.preemptible,
        status=JobStatus.queued,
    )
    session.add(job)
    session.flush()
    add_transition(session, job.id, None, JobStatus.queued, "submitted", 0)
    return job


def add_transition(
    session: Session, job_id: str, before: str | None, after: str, reason: str, attempt: int
) -> None:
    """One row per status change; the key's usage (app.domain.usage) follows it."""
    note_transition(session, job_id, before, after)
    reason = without_server_paths(reason)  # e.g. a stopped attempt's error, re-queued
    session.add(
        JobTransition(
            job_id=job_id, from_status=before, to_status=after, reason=reason, attempt=attempt
        )
    )


def get_job(session: Session, job_id: str) -> Job | None:
    return session.get(Job, job_id)


def transitions(session: Session, job_id: str) -> Sequence[JobTransition]:
    query = select(JobTransition).where(JobTransition.job_id == job_id).order_by(JobTransition.id)
    return session.scalars(query).all()


def claim_job(session: Session, job_id: str, worker: str, lease_seconds: float) -> Job | None:
    """Queued -> running for this worker, or None when someone else has it (or it ended).

    A new attempt, except for a preempted job resuming: preemption is nobody's failure."""
    now = utcnow()
    claimed = rows_changed(
        session,
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.queued)
        .values(
            status=JobStatus.running,
            attempt=Job.attempt + case((Job.preempted_by.is_(None), 1), else_=0),
            preempted_by=None,
            worker_name=worker,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            step_progress=None,  # an earlier attempt's steps are not this one's
            started_at=func.coalesce(Job.started_at, now),
            updated_at=now,
        ),
    )
    if not claimed:
        return None
    job = session.get(Job, job_id, populate_existing=True)
    assert job is not None
    add_transition(
        session, job.id, JobStatus.queued, JobStatus.running, f"claimed by {worker}", job.attempt
    )
    return job


def renew_lease(
    session: Session,
    job_id: str,
    attempt: int,
    lease_seconds: float,
    step_progress: Mapping[str, int] | None = None,
) -> Job | None:
    """Extend the lease of our attempt, with its child's latest step progress if given; None
    means the job is no longer ours (fencing)."""
    values: dict[str, Any] = {"lease_expires_at": utcnow() + timedelta(seconds=lease_seconds)}
    if step_progress is not None:
        values["step_progress"] = dict(step_progress)
    renewed = rows_changed(
        session,
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.status.in_(ACTIVE))
        .values(**values),
    )
    return session.get(Job, job_id, populate_existing=True) if renewed else None


def request_cancel(session: Session, job: Job) -> Job:
    """Queued: cancelled at once. Running: cancelling until the loop stops. Ended: Conflict."""
    now = utcnow()
    if job.status in TERMINAL:
        raise Conflict(f"job already {job.status}")
    if job.status == JobStatus.cancelling:
        return job
    before = job.status
    target = JobStatus.cancelled if before == JobStatus.queued else JobStatus.cancelling
    values: dict[str, Any] = {"status": target, "cancel_requested_at": now, "updated_at": now}
    if target == JobStatus.cancelled:
        values |= {"finished_at": now, "stop_reason": StopReason.cancelled}
    changed = rows_changed(
        session, update(Job).where(Job.id == job.id, Job.status == before).values(**values)
    )
    session.refresh(job)
    if not changed:  # it moved under us; decide again on the fresh state
        return request_cancel(session, job)
    add_transition(session, job.id, before, target, "cancel requested", job.attempt)
    return job


def finish_job(
    session: Session,
    job_id: str,
    attempt: int,
    status: JobStatus,
    *,
    stop_reason: StopReason | None,
    reason: str,
    error_code: ErrorCode | None = None,
    error: str | None = None,
    result: Mapping[str, Any] | None = None,
) -> bool:
    """End our attempt in one conditional UPDATE; False when it was no longer ours.

    A reaper and the supervisor may both try to end an attempt: the row's status and attempt
    are the condition, so exactly one of them writes the terminal state and its transition.
    """
    now = utcnow()
    values: dict[str, Any] = {
        "status": status,
        "stop_reason": stop_reason,
        "error_code": error_code,
        "error": None if error is None else without_server_paths(error),
        "finished_at": now,
        "updated_at": now,
        "lease_expires_at": None,
        "step_progress": None,
    }
    if result is not None:
        values["result"] = dict(result)
    for before in (JobStatus.running, JobStatus.cancelling):  # a job may move on, never back
        ended = rows_changed(
            session,
            update(Job)
            .where(Job.id == job_id, Job.attempt == attempt, Job.status == before)
            .values(**values),
        )
        if ended:
            if before == JobStatus.cancelling and status == JobStatus.succeeded:
                # The cancel raced the last epoch: the user asked to stop, the work is complete.
                reason = f"{reason} (cancel arrived after the last epoch)"
            add_transition(session, job_id, before, status, reason, attempt)
            return True
    return False


def requeue(session: Session, job: Job, cause: RequeueCause, detail: str | None = None) -> bool:
    """Running -> queued for `cause` (its reason: states.requeue_reason); False when the job is
    no longer this attempt's running one. A job being cancelled ends cancelled, never retried.

    A preemption keeps `preempted_by`, so the next claim resumes the same attempt (and is
    counted); any other cause clears it, so the next claim is a new attempt."""
    preempted = cause == RequeueCause.preempted
    fence = [Job.id == job.id, Job.attempt == job.attempt, Job.status == JobStatus.running]
    values: dict[str, Any] = {
        "status": JobStatus.queued,
        "lease_expires_at": None,
        "worker_name": None,
        "dispatched_at": None,
        "step_progress": None,
    }
    if preempted:
        fence.append(Job.preempted_by.is_not(None))
    else:
        values["preempted_by"] = None
    reason = requeue_reason(cause, detail, job.attempt, job.preempted_by)
    if not rows_changed(session, update(Job).where(*fence).values(**values)):
        return False
    add_transition(session, job.id, JobStatus.running, JobStatus.queued, reason, job.attempt)
    if preempted:
        scheduler_stats.count_preemption(session)
    return True


def expired_leases(session: Session) -> Sequence[Job]:
    query = select(Job).where(Job.status.in_(ACTIVE), Job.lease_expires_at < utcnow())
    return session.scalars(query).all()


def queued_jobs(session: Session) -> Sequence[Job]:
    return session.scalars(select(Job).where(Job.status == JobStatus.queued)).all()


def force_fail_queued(
    session: Session, job: Job, code: ErrorCode, message: str, stop: StopReason | None = None
) -> bool:
    """Queued -> failed without running (queue timeout, a gang that cannot form)."""
    now = utcnow()
    failed = rows_changed(
        session,
        update(Job)
        .where(Job.id == job.id, Job.status == JobStatus.queued)
        .values(
            status=JobStatus.failed,
            stop_reason=stop or StopReason(code),
            error_code=code,
            error=without_server_paths(message),
            finished_at=now,
            updated_at=now,
        ),
    )
    if failed:
        add_transition(session, job.id, JobStatus.queued, JobStatus.failed, message, job.attempt)
    return bool(failed)


def set_disk_bytes(session: Session, job_id: str, size: int) -> None:
    """What the job's directory holds now (its key's storage quota counts it)."""
    session.execute(update(Job).where(Job.id == job_id).values(disk_bytes=size))
