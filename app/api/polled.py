"""The routes polled most, a job's metrics, a job list and one job: what they answer, and a fast
path that answers a plainly valid request without FastAPI's routing, dependencies and parameter
validation, which cost more CPU than the query itself: each is Python run per request, where
the query is one indexed read (figures: docs/benchmarks.md, "Submit latency and polling").

The fast path answers only the success case: a GET with a key this process has read before
(app.domain.keys caches its row for a second, then it is read again here), parameters that
are plain digits or known names, and a job the key may see. Anything else (no key, a bad
or percent-encoded parameter, a cursor this API did not make, a job that is not there) goes on
to the FastAPI route, which answers with the status and error shape it always has; a database
that cannot serve the read gets the route's 503 (app.api.errors). The metrics and list routes
build their answers here; GET /v1/jobs/{id}'s route keeps its models (the ORM job, JobPublic)
and the fast path writes the same bytes from plain rows (tests/app/api/test_polled.py and
test_polled_job.py compare them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import key_row, may_see, owner_filter
from app.api.errors import database_unavailable, unavailable
from app.api.responses import FastJSON
from app.core.async_db import fetch
from app.domain import job_reads
from app.domain.keys import KEYS, Caller, split
from app.domain.redact import without_hosts
from app.domain.states import JobStatus
from app.domain.tables import Job, StoredStanding
from app.schemas.ids import ID_PART
from app.schemas.job_spec import FRAMEWORKS

METRICS_ROUTE = "/v1/jobs/{job_id}/metrics"
LIST_ROUTE = "/v1/jobs"
JOB_ROUTE = "/v1/jobs/{job_id}"
# Each route's bounds; its FastAPI parameters declare them from here (app.api.routes.jobs).
SINCE_EPOCH_BOUNDS = (0, 1_000_000)
METRICS_LIMIT_BOUNDS = (1, 10_000)
LIST_LIMIT = (1, 500)
LIST_DEFAULT_LIMIT = 50
METRICS_DEFAULT_LIMIT = 1000
CURSOR_MAX_CHARS = 512
FRAMEWORK_NAMES = frozenset(FRAMEWORKS)
STATUSES = frozenset(status.value for status in JobStatus)
# Matched whole (fullmatch: a `$` would let a trailing newline through).
METRICS_PATH = re.compile(f"/v1/jobs/({ID_PART})/metrics")
JOB_PATH = re.compile(f"/v1/jobs/({ID_PART})")
DIGITS = re.compile(r"[0-9]{1,7}")
ID = re.compile(ID_PART)


async def metrics_content(
    key: Caller, job_id: str, since_epoch: int, limit: int
) -> dict[str, Any] | None:
    """A job's rows after `since_epoch` (one query: the job with its rows); None when there is
    no such job or the key may not see it."""
    params = job_reads.metrics_params(job_id, since_epoch, limit)
    found = job_reads.metrics(await fetch(job_reads.METRICS_AFTER, params))
    if found is None or not may_see(key, found[0]):
        return None
    return {"job_id": job_id, "items": found[1]}


async def jobs_content(
    key: Caller, limit: int, cursor: str | None, **filters: str | None
) -> dict[str, Any]:
    """A page of job summaries the key may see; ValueError for a cursor this API did not make."""
    statement, params = job_reads.page_query(
        None, limit=limit, cursor=cursor, owner_id=owner_filter(key), **filters
    )
    items, next_cursor = job_reads.summaries(await fetch(statement, params), limit)
    return {"items": items, "next_cursor": next_cursor}


async def job_content(key: Caller, job_id: str) -> dict[str, Any] | None:
    """One job as its route shows it, from one statement (the job with its transitions and, if
    queued, the standing the scheduler stored); None when there is no such job, the key may
    not see it, or its JSON is more than orjson reads (the route answers those)."""
    rows = await fetch(job_reads.ONE_JOB, {"job_id": job_id})
    try:
        values = job_reads.job_values(rows) if rows else None
    except ValueError:  # JSON the route's models read otherwise: theirs is the answer
        return None
    if values is None or not may_see(key, values["owner_id"]):
        return None
    if values["nodes"] > 1 and not key.is_admin:  # its workers' names are looked up: the route
        return None
    if not key.is_admin:  # where it ran is an admin's to see (app.domain.redact)
        values["error"] = values["error"] and without_hosts(values["error"])
        for transition in values["transitions"]:
            transition["reason"] = without_hosts(transition["reason"])
    return job_reads.job_public(values)


def waiting(session: Session, job: Job) -> dict[str, Any]:
    """A job's wait_reason and queue, from the standing the scheduler stored (one read by
    key, and only for a queued job: app.scheduler.standings)."""
    stored = session.get(StoredStanding, job.id) if job.status == JobStatus.queued else None
    found = None
    if stored is not None:
        found = {name: getattr(stored, name) for name in job_reads.STANDING_FIELDS}
    return job_reads.waiting(job.status, found)


@dataclass(frozen=True)
class RouteName:
    """What the request metrics read of a matched route (app.observability.telemetry)."""

    path: str


class PolledFastPath:
    """Answer a plainly valid metrics poll or job list here; pass everything else on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        content = None
        if scope["type"] == "http" and scope["method"] == "GET":
            try:
                content = await self._answer(scope)
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                # The route's 503, without trying the database a second time.
                await unavailable(scope["method"], scope["path"], exc)(scope, receive, send)
                return
        response = _rendered(content) if content is not None else None
        if response is None:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)

    async def _answer(self, scope: Scope) -> dict[str, Any] | None:
        found = _route(scope["path"])
        query = _plain_query(scope["query_string"]) if found is not None else None
        key = await _caller(scope["headers"]) if query is not None else None
        if found is None or key is None or query is None:
            return None
        template, job_id = found
        if template == LIST_ROUTE:
            content = await _jobs_page(key, query)
        elif template == METRICS_ROUTE:
            content = await _metrics(key, job_id, query)
        else:  # the route reads no parameter: any plain query is ignored, as FastAPI does
            content = await job_content(key, job_id)
        if content is not None:  # the request metrics label it by its route, as routing would
            scope["route"] = RouteName(template)
            scope["path_params"] = {"job_id": job_id} if job_id else {}
        return content


def _route(path: str) -> tuple[str, str] | None:
    """The route template a path would match, with its job id ("" for the list); None for a
    path the fast path does not answer."""
    if path == LIST_ROUTE:
        return LIST_ROUTE, ""
    if not path.startswith("/v1/jobs/"):
        return None
    metrics = path.endswith("/metrics")
    match = (METRICS_PATH if metrics else JOB_PATH).fullmatch(path)
    if match is None:
        return None
    return METRICS_ROUTE if metrics else JOB_ROUTE, match.group(1)


def _rendered(content: dict[str, Any]) -> FastJSON | None:
    """The answer's response; None when orjson cannot write it (an int past 64 bits in a job's
    result), which the route's models can."""
    try:
        return FastJSON(content)
    except orjson.JSONEncodeError:
        return None


def _plain_query(raw: bytes) -> dict[str, str] | None:
    """The query's parameters when none is encoded, blank or repeated; else None."""
    if b"%" in raw or b"+" in raw:
        return None
    params: dict[str, str] = {}
    for part in raw.decode("ascii", "replace").split("&") if raw else ():
        name, eq, value = part.partition("=")
        if not eq or not value or name in params:
            return None
        params[name] = value
    return params


async def _caller(headers: list[tuple[bytes, bytes]]) -> Caller | None:
    """The caller when its key is one this process has seen: from the cache, or read again on
    the loop once its cached row is older than the cache keeps it (a poller's key, every
    second). A key never seen goes the route's way, which reads it, fills the cache and
    answers the 401s."""
    value = next((v for k, v in headers if k == b"authorization"), None)
    if value is None or not value.startswith(b"Bearer "):
        return None
    parts = split(value[7:].decode("latin-1"))
    if parts is None or not KEYS.known(parts[0]):
        return None
    row = await key_row(parts[0])
    return row.check(*parts) if row is not None else None


def _bounded(value: str | None, default: int, bounds: tuple[int, int]) -> int | None:
    if value is None:
        return default
    if not DIGITS.fullmatch(value):
        return None
    number = int(value)
    return number if bounds[0] <= number <= bounds[1] else None


async def _metrics(key: Caller, job_id: str, query: dict[str, str]) -> dict[str, Any] | None:
    since = _bounded(query.get("since_epoch"), 0, SINCE_EPOCH_BOUNDS)
    limit = _bounded(query.get("limit"), METRICS_DEFAULT_LIMIT, METRICS_LIMIT_BOUNDS)
    if since is None or limit is None:
        return None
    return await metrics_content(key, job_id, since, limit)


async def _jobs_page(key: Caller, query: dict[str, str]) -> dict[str, Any] | None:
    limit = _bounded(query.get("limit"), LIST_DEFAULT_LIMIT, LIST_LIMIT)
    status, framework = query.get("status"), query.get("framework")
    sweep_id, cursor = query.get("sweep_id"), query.get("cursor")
    if (
        limit is None
        or (status is not None and status not in STATUSES)
        or (framework is not None and framework not in FRAMEWORK_NAMES)
        or (sweep_id is not None and not ID.fullmatch(sweep_id))
        or (cursor is not None and len(cursor) > CURSOR_MAX_CHARS)
    ):
        return None
    try:
        return await jobs_content(
            key, limit, cursor, status=status, framework=framework, sweep_id=sweep_id
        )
    except ValueError:  # not a cursor of ours: the route's 422
        return None
