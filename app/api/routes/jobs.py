"""Jobs: submit, list, read, metrics, continue, cancel, delete."""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from app.api import polled
from app.api.deps import (
    CurrentKey,
    JobDep,
    JobId,
    SessionDep,
    check_job_dataset,
    check_job_fits,
    check_job_init,
    check_job_priority,
    release_db,
)
from app.api.errors import documented
from app.api.polled import (
    CURSOR_MAX_CHARS,
    LIST_DEFAULT_LIMIT,
    LIST_LIMIT,
    METRICS_DEFAULT_LIMIT,
    METRICS_LIMIT_BOUNDS,
    SINCE_EPOCH_BOUNDS,
)
from app.api.responses import FastJSON
from app.core.config import get_settings
from app.domain import crud, datasets, key_jobs, retention
from app.domain.keys import Caller
from app.domain.redact import job_texts, without_server_paths
from app.domain.states import JobStatus, SweepStatus
from app.domain.tables import Job, Sweep
from app.domain.warm_start import InitProblem, continued_body
from app.scheduler import standings
from app.schemas.api import JobPublic, JobsPublic, JobSummary, MetricsPublic
from app.schemas.continuation import ContinueRequest
from app.schemas.ids import ID_CHARS, ID_MAX_LENGTH
from app.schemas.job_spec import FRAMEWORKS, JobSpec
from app.schemas.stored_spec import shown
from app.services import sweeps
from app.services.publish import publish_new
from app.services.queue import queue_for_gpus

router = APIRouter(prefix="/jobs", tags=["jobs"])
FRAMEWORK_NAME = "^(" + "|".join(sorted(FRAMEWORKS)) + ")$"


def summary(job: Job) -> JobSummary:
    return JobSummary(
        **{f: getattr(job, f) for f in JobSummary.model_fields if hasattr(Job, f)},
        **shown(job.spec),
    )


def public(session: SessionDep, job: Job, key: Caller | None = None) -> JobPublic:
    """A job as the routes answer it, from its ORM row (GET /v1/jobs/{id} also has a fast path
    that writes the same bytes from plain rows: app.api.polled.job_content). A multi-node job's
    texts name its workers: `key` sees them unless it is an admin's (None: none is shown)."""
    shown = job_texts(session, job, key)
    found = JobPublic.model_validate(
        {
            **summary(job).model_dump(),
            "error_code": job.error_code,
            "error": job.error and shown(without_server_paths(job.error)),  # rows before §10c
            "result": job.result,
            "spec": job.spec,
            **polled.waiting(session, job),
            "priority": job.priority,
            "step_progress": job.step_progress,
            "transitions": crud.transitions(session, job.id),
        }
    )
    for transition in found.transitions:
        transition.reason = shown(transition.reason)
    return found


def _replay(session: SessionDep, key: CurrentKey, idem: str, digest: str) -> Job | None:
    """The job an earlier request with this Idempotency-Key made; 409 if its body differed."""
    earlier = key_jobs.find_idempotent(session, key.id, idem)
    if earlier is not None and earlier.request_hash != digest:
        raise HTTPException(409, "this Idempotency-Key was used with a different body")
    return earlier


def _check_quota(session: SessionDep, key: CurrentKey, nodes: int) -> None:
    """429 past the key's queued or running jobs, a multi-node job counted once per node."""
    limit = get_settings().max_active_jobs_per_key
    if not limit:
        return
    active = key_jobs.count_active(session, key.id)
    if active + nodes <= limit:
        return
    if nodes == 1:
        raise HTTPException(429, f"this key already has {limit} queued or running jobs")
    raise HTTPException(
        429,
        f"this job runs on {nodes} nodes and counts as {nodes} jobs; this key has {active} "
        f"queued or running of its {limit} (EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY)",
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobPublic,
    operation_id="create_job",
    responses={
        200: {"model": JobPublic, "description": "an earlier request with this Idempotency-Key"},
        403: documented("a priority over the key's cap, or preemptible: false from a non-admin"),
        404: documented("init.from_job or continues names no job of this key"),
        409: documented("this Idempotency-Key came with another body"),
        429: documented("this key has EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY queued or running jobs"),
        507: documented("over the key's EPOCHAL_MAX_STORAGE_BYTES_PER_KEY"),
    },
)
async def create_job(
    session: SessionDep,
    key: CurrentKey,
    spec: JobSpec,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> JobPublic:
    """Submit a training job; it is stored before it is queued."""
    job, body = await run_in_threadpool(_store, session, key, spec, idempotency_key)
    if job is None:
        response.status_code = status.HTTP_200_OK
        return body
    # While the broker is away the publish retries for seconds: not with this request's DB
    # slot held, which other requests need. A failed publish leaves it to the reconciler.
    await release_db(session)
    await run_in_threadpool(publish_new, [job])
    return body


def _store(
    session: SessionDep, key: CurrentKey, spec: JobSpec, idempotency_key: str | None
) -> tuple[Job | None, JobPublic]:
    """The new job, committed, and its body; (None, the earlier job's body) for a replay."""
    digest = hashlib.sha256(spec.model_dump_json().encode()).hexdigest()
    if idempotency_key and (earlier := _replay(session, key, idempotency_key, digest)):
        return None, public(session, earlier)
    _check_quota(session, key, spec.resources.nodes)
    check_job_dataset(session, key, spec)  # an upload must exist, be yours, and fit the model
    # and fit in a worker's memory and disk; the one admission, its model built once, that
    # the stored job's summary and estimates come from (init and priority leave them as they are)
    admitted = check_job_fits(session, key, spec)
    spec = check_job_init(session, key, spec)  # a warm start's nodes, resolved and checked
    spec = check_job_priority(session, key, spec)  # within the key's cap
    disk = admitted.disk_bytes  # reserved in the key's storage quota until it ran
    if why := datasets.over_quota(session, key.id, disk or 0, "this job's files need"):
        raise HTTPException(507, why)
    try:
        job = crud.create_job(
            session,
            spec,
            queue_for_gpus(spec.resources.gpus),
            owner_id=key.id,
            idempotency_key=idempotency_key,
            request_hash=digest,
            disk_bytes=disk,
            admitted=admitted,
        )
        session.commit()
    except IntegrityError:  # a concurrent request with the same key won the race
        session.rollback()
        earlier = _replay(session, key, idempotency_key or "", digest)
        if earlier is None:
            raise
        return None, public(session, earlier)
    standings.refresh(get_settings())  # its standing, and of the jobs it went ahead of
    return job, public(session, job)


@router.get("", response_model=JobsPublic, operation_id="list_jobs")
async def read_jobs(
    key: CurrentKey,
    status_: Annotated[JobStatus | None, Query(alias="status")] = None,
    framework: Annotated[str | None, Query(pattern=FRAMEWORK_NAME)] = None,
    limit: Annotated[int, Query(ge=LIST_LIMIT[0], le=LIST_LIMIT[1])] = LIST_DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
    sweep_id: Annotated[str | None, Query(max_length=ID_MAX_LENGTH, pattern=ID_CHARS)] = None,
) -> Response:
    """List jobs, newest first, with cursor pagination."""
    filters = {"status": status_, "framework": framework, "sweep_id": sweep_id}
    try:
        return FastJSON(await polled.jobs_content(key, limit, cursor, **filters))
    except ValueError as exc:  # a cursor this API did not make
        raise HTTPException(status_code=422, detail=str(exc)) from exc


@router.get("/{job_id}", response_model=JobPublic, operation_id="get_job")
def read_job(session: SessionDep, job: JobDep, key: CurrentKey) -> JobPublic:
    """One job: spec, status, progress, result, transitions."""
    return public(session, job, key)


@router.get("/{job_id}/metrics", response_model=MetricsPublic, operation_id="list_metrics")
async def read_metrics(
    key: CurrentKey,
    job_id: JobId,
    since_epoch: Annotated[int, Query(ge=SINCE_EPOCH_BOUNDS[0], le=SINCE_EPOCH_BOUNDS[1])] = 0,
    limit: Annotated[
        int, Query(ge=METRICS_LIMIT_BOUNDS[0], le=METRICS_LIMIT_BOUNDS[1])
    ] = METRICS_DEFAULT_LIMIT,
) -> Response:
    """Per-epoch metrics after `since_epoch` (cheap to poll: one query, the job with its rows)."""
    content = await polled.metrics_content(key, job_id, since_epoch, limit)
    if content is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return FastJSON(content)


@router.post(
    "/{job_id}/continue",
    status_code=status.HTTP_201_CREATED,
    response_model=JobPublic,
    operation_id="continue_job",
    responses={
        409: documented("the job has not succeeded"),
        429: documented("this key has EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY queued or running jobs"),
        507: documented("over the key's EPOCHAL_MAX_STORAGE_BYTES_PER_KEY"),
    },
)
async def continue_job(
    session: SessionDep, job: JobDep, key: CurrentKey, body: ContinueRequest
) -> JobPublic:
    """A new job training `epochs` more from this one's last checkpoint (weights, optimizer
    state, schedule, early stopping); its epochs are numbered on and its spec names this job
    in `continues`. The body may change what the checkpoint does not fix (name, tags,
    priority, run-time limit, early stopping's patience, data of the same shapes); a field
    that it fixes is a 422 naming it."""
    if job.status != JobStatus.succeeded:
        raise HTTPException(409, f"job {job.id} is {job.status}; only a succeeded job continues")
    try:
        spec = JobSpec.model_validate(continued_body(job, body))
    except ValidationError as exc:  # e.g. more epochs in all than a job may have
        raise RequestValidationError(exc.errors()) from None
    except InitProblem as exc:
        raise RequestValidationError(exc.errors) from None
    new, answer = await run_in_threadpool(_store, session, key, spec, None)
    assert new is not None  # no Idempotency-Key: never a replay
    await release_db(session)
    await run_in_threadpool(publish_new, [new])
    return answer


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    operation_id="cancel_job",
    responses={409: documented("the job has ended already")},
)
def cancel_job(session: SessionDep, job: JobDep, key: CurrentKey) -> JobPublic:
    """Cancel: a queued job never runs; a running one stops at the next step boundary."""
    try:
        crud.request_cancel(session, job)
    except crud.Conflict as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc
    session.commit()
    if job.status == JobStatus.cancelled:  # a queued job left: the ones behind it moved up
        standings.refresh(get_settings())
    if job.sweep_id and job.status == JobStatus.cancelled:  # a queued trial ended at once
        sweeps.trial_ended(job.sweep_id)
    return public(session, job, key)


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="delete_job",
    responses={409: documented("the job has not ended, or its sweep is still running")},
)
def delete_job(session: SessionDep, job: JobDep) -> Response:
    """Delete a finished job: its rows, events and files (409 until it has ended)."""
    job_id, sweep = job.id, session.get(Sweep, job.sweep_id) if job.sweep_id else None
    if sweep is not None and sweep.status == SweepStatus.running:
        raise HTTPException(409, f"job {job_id} is a trial of sweep {sweep.id}, still running")
    if not retention.delete_job_rows(session, job_id):  # conditional: only a finished job
        raise HTTPException(409, f"job {job_id} is {job.status}; cancel it and let it end first")
    session.commit()
    retention.remove_job_files(get_settings().resolved_artifacts_dir, job_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
