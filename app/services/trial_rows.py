"""A sweep trial's job row: queued like any job when it is admitted, failed with the reason
when no submit would admit it (app.services.trial_limits)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.domain import crud
from app.domain.admission import Admitted
from app.domain.states import ErrorCode, JobStatus, StopReason
from app.domain.tables import Job, Sweep, utcnow
from app.schemas.job_spec import JobSpec
from app.schemas.priority import PRIORITY_DEFAULT
from app.services.queue import queue_for_gpus


def queued(
    session: Session,
    sweep: Sweep,
    job_spec: JobSpec,
    number: int,
    disk: int | None,
    admitted: Admitted,
) -> Job:
    """The trial as an ordinary queued job of the sweep's owner, its files reserved, with
    the summary and estimates of its admission (app.services.trial_limits)."""
    job = crud.create_job(
        session,
        job_spec,
        queue_for_gpus(job_spec.resources.gpus),
        owner_id=sweep.owner_id,
        disk_bytes=disk,
        admitted=admitted,
    )
    job.sweep_id, job.sweep_trial = sweep.id, number
    session.flush()
    return job


def refused(session: Session, sweep: Sweep, body: dict[str, Any], number: int, why: str) -> Job:
    """A trial no submit would admit, as a failed job that never queued: the spec as drawn
    (over the base's, so that a section a value replaced still has what a job shows)."""
    base = spec_base(sweep)
    stored = merged(base, body)
    resources = stored.get("resources") or {}
    job = Job(
        owner_id=sweep.owner_id,
        name=str(body.get("name", sweep.name))[:128],
        framework=str(stored.get("framework", base.get("framework"))),
        spec=stored,
        queue=queue_for_gpus(int(resources.get("gpus") or 0)),
        nodes=int(resources.get("nodes") or 1),
        priority=int(stored.get("priority", PRIORITY_DEFAULT)),
        preemptible=bool(stored.get("preemptible", True)),
        max_restarts=0,
        status=JobStatus.failed,
        stop_reason=StopReason.error,
        error_code=ErrorCode.invalid_config,
        error=why,
        finished_at=utcnow(),
        sweep_id=sweep.id,
        sweep_trial=number,
    )
    session.add(job)
    session.flush()
    crud.add_transition(session, job.id, None, JobStatus.failed, why, 0)
    return job


def spec_base(sweep: Sweep) -> dict[str, Any]:
    base = sweep.spec.get("base")
    return base if isinstance(base, dict) else {}


def merged(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` with what it lacks of `under`, section by section."""
    out = dict(under)
    for key, value in over.items():
        below = out.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            value = merged(below, value)
        out[key] = value
    return out
