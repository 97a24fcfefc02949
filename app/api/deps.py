"""Dependencies shared by the routes: a DB session per request, the caller's key, job lookup,
the check that a job may use its uploaded data set, and one-hop reads for the hot routes."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, TypeVar

from fastapi import Depends, HTTPException, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session

from app.core.async_db import fetch
from app.core.db import DB_SLOTS, session_factory
from app.domain import crud, datasets
from app.domain.admission import Admitted, admit, sweep_admission_errors
from app.domain.keys import KEY_ROW, KEYS, Caller, KeyRow, split
from app.domain.tables import ApiKey, Job
from app.domain.warm_start import InitProblem, check_continues, resolve_init
from app.scheduler.policy import priority_problem
from app.schemas.ids import ID_CHARS, ID_MAX_LENGTH
from app.schemas.job_spec import JobSpec
from app.schemas.sweep import SweepSpec

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key, `Authorization: Bearer ep_…`: `epochal keys create NAME`, or the "
    "admin key `epochal up` writes to `$EPOCHAL_HOME/api-key`.",
)


async def get_db() -> AsyncIterator[Session]:
    """A session per request, holding one of this process's DB slots until it is released.

    Sync dependencies run on a thread pool and a session keeps its connection between them,
    so without the slots a burst of requests larger than pool + threads deadlocks: every
    connection held by a request waiting for a thread, every thread waiting for a connection
    (seen with 200 SSE clients: 30 s pool timeouts, nothing served). With at most
    `DB_SLOTS` sessions in flight, a request that has a slot always gets a connection.
    """
    slots = _slots()
    await slots.acquire()
    session = session_factory()()  # connects on first use, in a dependency's thread
    session.info[_SLOT] = slots.release
    try:
        yield session
    finally:
        await release_db(session)


async def release_db(session: Session) -> None:
    """Close the session and give its slot back (a long stream does it before streaming)."""
    release_slot = session.info.pop(_SLOT, None)
    if release_slot is None:
        return
    try:
        await run_in_threadpool(session.close)  # a rollback: I/O, so not on the event loop
    finally:
        release_slot()


_SLOT = "epochal.db_slot"
_slots_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _slots_by_loop.get(loop)
    if slots is None:
        slots = _slots_by_loop[loop] = asyncio.Semaphore(DB_SLOTS)
    return slots


SessionDep = Annotated[Session, Depends(get_db)]
_session_with_slot = asynccontextmanager(get_db)
T = TypeVar("T")


async def with_session(work: Callable[[Session], T]) -> T:
    """work(session) on a thread, outside FastAPI's dependencies: the session holds a DB slot
    as a route's does (get_db)."""
    async with _session_with_slot() as session:
        return await run_in_threadpool(work, session)


async def current_key(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """The caller's live API key; 401 without one, saying which of three things is wrong: no
    key sent, a malformed header or key, or a key that is unknown or revoked (never which).

    On the event loop: the key's row comes from the in-process cache (app.domain.keys), read
    from the database on a thread only when it is not there or is older than a second.
    """
    return await caller_for(request.headers.get("authorization"))


async def caller_for(header: str | None) -> Caller:
    """The live key an Authorization header presents; HTTPException 401 (current_key's
    three reasons) otherwise. Also run before an upload's body is read (app.api.upload_gate)."""
    scheme, token = get_authorization_scheme_param(header)
    parts = split(token) if header and scheme.lower() == "bearer" and token else None
    if parts is None:
        raise unauthorized(_unusable(header))
    key_id, secret = parts
    row = await key_row(key_id)
    caller = row.check(key_id, secret) if row is not None else None
    if caller is None:
        raise unauthorized(f"unknown or revoked API key; {KEY_HELP}")
    return caller


async def key_row(key_id: str) -> KeyRow | None:
    """The key's row from the in-process cache, else read on the loop (None: no such key)."""
    row = KEYS.get(key_id)
    if row is None:
        found = await fetch(KEY_ROW, {"key_id": key_id})
        row = KEYS.store(key_id, found[0] if found else None)
    return row


KEY_HELP = "create one with `epochal keys create NAME` (make run writes $EPOCHAL_HOME/api-key)"


def _unusable(header: str | None) -> str:
    """Why an Authorization header (or its absence) holds no key to look up."""
    if header is None or not header.strip():
        return f"no API key sent: send the header Authorization: Bearer <key>; {KEY_HELP}"
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return "malformed Authorization header: expected `Bearer <key>`"
    return "malformed API key: epochal keys look like ep_<12 hex digits>_<secret>"


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


CurrentKey = Annotated[Caller, Depends(current_key)]


def owner_filter(key: Caller) -> str | None:
    """None for an admin (sees everything), else the key's id."""
    return None if key.is_admin else key.id


def may_see(key: Caller, owner_id: str | None) -> bool:
    """An admin sees every job; a key its own."""
    return key.is_admin or owner_id == key.id


# Job ids are UUIDs: anything else (a NUL byte would make PostgreSQL fail) is a 422.
JobId = Annotated[str, Path(max_length=ID_MAX_LENGTH, pattern=ID_CHARS)]


def get_job_or_404(session: SessionDep, key: CurrentKey, job_id: JobId) -> Job:
    """The job if it exists and the caller may see it; another owner's job is a 404 too."""
    job = crud.get_job(session, job_id)
    if job is None or not may_see(key, job.owner_id):
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return job


JobDep = Annotated[Job, Depends(get_job_or_404)]


def check_job_dataset(session: Session, key: Caller, spec: JobSpec) -> None:
    """422 naming dataset.id when the job's upload is missing, not the caller's, or unfit."""
    problem = datasets.problem_for_spec(session, spec, key)
    if problem is not None:
        raise RequestValidationError(
            [{"loc": ("body", "dataset", "id"), "msg": problem, "type": "value_error"}]
        )


def check_job_init(session: Session, key: Caller, spec: JobSpec) -> JobSpec:
    """The spec with init's nodes resolved (app.domain.warm_start); 404 when the job that
    init or `continues` names is not the caller's, 422 naming the field when it cannot start
    this job."""
    try:
        check_continues(session, key, spec)
        return resolve_init(session, key, spec)
    except InitProblem as exc:
        if exc.status == 404:
            raise HTTPException(404, str(exc)) from None
        raise RequestValidationError(exc.errors) from None


def check_sweep_init(session: Session, key: Caller, spec: SweepSpec) -> None:
    """The base's init checked as a job's is (404, or a 422 naming base.init's field); the
    sweep keeps it as given, and each trial's is resolved for its own graph when it is
    launched (app.services.trial_limits)."""
    try:
        resolve_init(session, key, spec.base)
    except InitProblem as exc:
        if exc.status == 404:
            raise HTTPException(404, str(exc)) from None
        errors = [{**e, "loc": ("body", "base", *e["loc"][1:])} for e in exc.errors]
        raise RequestValidationError(errors) from None


def check_sweep_datasets(session: Session, key: Caller, spec: SweepSpec) -> None:
    """check_job_dataset for the base and every data set a parameter can name."""
    if spec.base.continues is not None:  # each trial would go on from one checkpoint
        msg = "a sweep's trials cannot continue a job; warm-start them with init instead"
        loc = ("body", "base", "continues")
        raise RequestValidationError([{"loc": loc, "msg": msg, "type": "value_error"}])
    check_job_dataset(session, key, spec.base)
    if errors := datasets.sweep_problems(session, spec, key):
        raise RequestValidationError(errors)


def check_job_fits(session: Session, key: Caller, spec: JobSpec) -> Admitted:
    """The job's admission (its model built once: app.domain.admission.admit); 422 naming the
    fields when its estimated memory or disk exceeds any worker's."""
    admitted = admit(session, spec, key)
    if admitted.errors:
        raise RequestValidationError(admitted.errors)
    return admitted


def check_sweep_fits(session: Session, key: Caller, spec: SweepSpec) -> None:
    """check_job_fits for a sweep: its base, and each parameter's ends on it."""
    if errors := sweep_admission_errors(session, spec, key):
        raise RequestValidationError(errors)


Spec = TypeVar("Spec", JobSpec, SweepSpec)


def check_job_priority(session: Session, key: Caller, spec: Spec) -> Spec:
    """403 when the key may not ask this priority (its admin-set cap) or preemptible: false.
    The spec to store: one that asks no priority runs at the default or the key's cap,
    whichever is lower."""
    row = session.get(ApiKey, key.id)
    cap = None if key.is_admin or row is None else row.max_priority
    spec = _default_within(spec, cap)
    job = spec.base if isinstance(spec, SweepSpec) else spec
    priority = (
        spec.priority if isinstance(spec, SweepSpec) and spec.priority is not None else job.priority
    )
    problem = priority_problem(priority, job.preemptible, is_admin=key.is_admin, max_priority=cap)
    if problem is not None:
        raise HTTPException(403, problem)
    return spec


def _default_within(spec: Spec, cap: int | None) -> Spec:
    """The spec with the cap as its priority where it asks none and the default is above."""
    if isinstance(spec, SweepSpec):
        job, asked = spec.base, spec.priority is not None
    else:
        job, asked = spec, False
    asked = asked or "priority" in job.model_fields_set
    if cap is None or asked or job.priority <= cap:
        return spec
    return spec.model_copy(update={"priority": cap})
