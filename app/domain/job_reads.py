"""Reads behind the routes that are polled most, as SQLAlchemy Core: one statement each, built
once per shape with named parameters (making a statement cost more than running it), rows in
as plain tuples (app.core.async_db runs them), JSON-ready dicts out; and list_jobs, a page of
the same statement as ORM objects."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

import orjson
from sqlalchemy import Integer, Select, String, Text, and_, bindparam, cast, select, tuple_
from sqlalchemy.orm import Session

from app.domain.paging import cursor_after, decode_cursor, encode_cursor
from app.domain.redact import without_server_paths
from app.domain.states import JobStatus
from app.domain.tables import EpochMetric, Job, JobTransition, StoredStanding, UTCDateTime
from app.schemas.api import JobPublic, JobSummary, TransitionPublic
from app.schemas.metric_row import ROW_FIELDS
from app.schemas.stored_spec import shown

# A job in a list, as app.schemas.api.JobSummary orders it: columns of the job, and `epochs`,
# `tags` and `best_metric_name` from its spec. The JSON columns come as text, parsed here by
# orjson: PostgreSQL's JSON operators fail on a whole document when one of its strings holds an
# escaped NUL (a tag may), and asyncpg hands JSON over as text anyway.
SUMMARY_FIELDS = tuple(JobSummary.model_fields)
FROM_SPEC = ("epochs", "tags", "best_metric_name")
AS_TEXT = ("model_summary", "spec")  # read last, in this order
SUMMARY_COLUMNS = (
    *(name for name in SUMMARY_FIELDS if name not in FROM_SPEC + AS_TEXT),
    *AS_TEXT,
)
# The filters of a job list, each an equality on the column of the same name.
FILTERS = ("owner_id", "status", "framework", "sweep_id")
Row = Sequence[Any]


@cache
def page_statement(entity: Any, filters: frozenset[str], after: bool) -> Select[*tuple[Any, ...]]:
    """A page of jobs newest first, with these filters and (`after`) past a cursor; one row
    more than the `limit` parameter, to tell whether a next page exists. Made once per shape.

    `entity` is Job (ORM rows) or None (the summary columns)."""
    if entity is None:
        columns = [getattr(Job, name) for name in SUMMARY_COLUMNS[: -len(AS_TEXT)]]
        texts = [cast(getattr(Job, name), Text).label(name) for name in AS_TEXT]
        query = select(*columns, *texts)
    else:
        query = select(entity)
    query = query.order_by(Job.created_at.desc(), Job.id.desc())
    for name in sorted(filters):
        query = query.where(getattr(Job, name) == bindparam(name, type_=String))
    if after:
        # A row-value comparison: the index seeks to the cursor. The equivalent OR of two
        # conditions is no index range to PostgreSQL, so it walks the index from the newest
        # job, and a page costs more the deeper it is in the list.
        cursor = (bindparam("after_at", type_=UTCDateTime), bindparam("after_id", type_=String))
        query = query.where(tuple_(Job.created_at, Job.id) < tuple_(*cursor))
    return query.limit(bindparam("limit", type_=Integer))


def page_query(
    entity: Any, *, limit: int, cursor: str | None = None, **filters: str | None
) -> tuple[Select[*tuple[Any, ...]], dict[str, Any]]:
    """The statement and parameters of a page; filters apply before paging so pages are never
    short for that reason. ValueError for a cursor this service did not make."""
    params: dict[str, Any] = {"limit": limit + 1}
    for name in FILTERS:
        if filters.get(name):
            params[name] = str(filters[name])
    if cursor:
        params["after_at"], params["after_id"] = decode_cursor(cursor)
    chosen = frozenset(name for name in FILTERS if name in params)
    return page_statement(entity, chosen, bool(cursor)), params


def list_jobs(session: Session, *, limit: int, **filters: Any) -> tuple[list[Job], str | None]:
    """A page of jobs as ORM objects (filters as page_query) and the next page's cursor; the
    API's list serves summaries instead."""
    query, params = page_query(Job, limit=limit, **filters)
    jobs = list(session.scalars(query, params))
    next_cursor = encode_cursor(jobs[limit - 1]) if len(jobs) > limit else None
    return jobs[:limit], next_cursor


def summaries(rows: Sequence[Row], limit: int) -> tuple[list[dict[str, Any]], str | None]:
    """A page's job summaries from its rows, and the next page's cursor (None on the last)."""
    items = [_summary(row) for row in rows[:limit]]
    last = items[-1] if len(rows) > limit else None
    return items, cursor_after(last["created_at"], last["id"]) if last else None


def _summary(row: Row) -> dict[str, Any]:
    values = dict(zip(SUMMARY_COLUMNS, row, strict=True))
    spec = orjson.loads(values.pop("spec"))
    if values["model_summary"] is not None:
        values["model_summary"] = orjson.loads(values["model_summary"])
    values |= shown(spec)
    return {name: values[name] for name in SUMMARY_FIELDS}


# One job as GET /v1/jobs/{id} shows it (app.schemas.api.JobPublic), in one statement: the
# summary's columns, the few more the answer and its checks need, the JSON columns as text (as
# the list reads them), then a transition's columns as TransitionPublic orders them; a row per
# transition, oldest first (a job without any comes back as one row, its transition all NULL:
# to_status is NOT NULL in the table). Two statements would be two round trips, each with its
# own parse, bind and result handling.
JOB_FIELDS = tuple(JobPublic.model_fields)
AS_JSON = (*AS_TEXT, "result", "step_progress")
JOB_COLUMNS = (
    *SUMMARY_COLUMNS[: -len(AS_TEXT)],
    *("error_code", "error", "priority", "owner_id", "gpus", "nodes", "memory_bytes"),
    *AS_JSON,
)
TRANSITION_FIELDS = tuple(TransitionPublic.model_fields)
# A queued job's standing as the scheduler stored it (app.scheduler.standings), on every row.
STANDING_FIELDS = ("wait_reason", "position", "reason", "estimated_start")
# What a queued job whose standing was not worked out yet shows (no position, no estimate).
UNKNOWN = "queued: its place in the queue is worked out within a maintenance round"
ONE_JOB = (
    select(
        *(getattr(Job, name) for name in JOB_COLUMNS[: -len(AS_JSON)]),
        *(cast(getattr(Job, name), Text).label(name) for name in AS_JSON),
        *(getattr(JobTransition, name) for name in TRANSITION_FIELDS),
        *(getattr(StoredStanding, name) for name in STANDING_FIELDS),
    )
    .select_from(Job)
    .outerjoin(JobTransition, JobTransition.job_id == Job.id)
    .outerjoin(StoredStanding, StoredStanding.job_id == Job.id)
    .where(Job.id == bindparam("job_id", type_=String))
    .order_by(JobTransition.id)
)
# orjson reads an int past 64 bits (-2**63 has 19 digits) as a float, json.loads as an int; a
# string with such a run of digits (rare) goes the route's way too.
LONG_NUMBER = re.compile(r"[0-9]{19}")


def job_values(rows: Sequence[Row]) -> dict[str, Any]:
    """The job of ONE_JOB's rows by column name, its JSON parsed, with its transitions;
    ValueError for JSON that orjson reads otherwise than the ORM's json.loads, or not at all
    (a NaN that SQLite's JSON kept)."""
    width = len(JOB_COLUMNS)
    values = dict(zip(JOB_COLUMNS, rows[0][:width], strict=True))
    for name in AS_JSON:
        if values[name] is not None:
            if LONG_NUMBER.search(values[name]):
                raise ValueError(f"{name} holds a number of 19 digits or more")
            values[name] = orjson.loads(values[name])
    stored = width + len(TRANSITION_FIELDS)
    values["transitions"] = [
        dict(zip(TRANSITION_FIELDS, row[width:stored], strict=True))
        for row in rows
        if row[width + TRANSITION_FIELDS.index("to_status")] is not None
    ]
    standing = dict(zip(STANDING_FIELDS, rows[0][stored:], strict=True))
    values["standing"] = standing if standing["position"] is not None else None
    return values


def waiting(status: str, stored: dict[str, Any] | None) -> dict[str, Any]:
    """A job's wait_reason and queue (position, reason, estimated start) from its stored
    standing (STANDING_FIELDS): None and None once it left the queue; UNKNOWN and no position
    while the scheduler has not worked it out yet."""
    if status != JobStatus.queued:
        return {"wait_reason": None, "queue": None}
    if stored is None:
        stored = {"wait_reason": UNKNOWN, "position": None, "reason": UNKNOWN}
    queue = {"position": stored["position"], "reason": stored["reason"]}
    return {
        "wait_reason": stored["wait_reason"],
        "queue": {**queue, "estimated_start": stored.get("estimated_start")},
    }


def job_public(values: dict[str, Any]) -> dict[str, Any]:
    """GET /v1/jobs/{id}'s answer from job_values, with its wait_reason and queue (waiting)."""
    error = values["error"]
    found = {
        **values,
        **shown(values["spec"]),
        "error": error and without_server_paths(error),  # rows written before §10c
        **waiting(values["status"], values["standing"]),
    }
    return {name: found[name] for name in JOB_FIELDS}


# The job joined to its rows after an epoch: the owner comes with the rows, and a job without
# rows after `since` still comes back, as one row of NULLs (epoch is NOT NULL in the table).
METRICS_AFTER = (
    select(Job.owner_id, *(getattr(EpochMetric, name) for name in ROW_FIELDS))
    .select_from(Job)
    .outerjoin(
        EpochMetric,
        and_(EpochMetric.job_id == Job.id, EpochMetric.epoch > bindparam("since", type_=Integer)),
    )
    .where(Job.id == bindparam("job_id", type_=String))
    .order_by(EpochMetric.epoch)
    .limit(bindparam("limit", type_=Integer))
)


def metrics_params(job_id: str, since_epoch: int, limit: int) -> dict[str, Any]:
    return {"job_id": job_id, "since": since_epoch, "limit": limit}


def metrics(rows: Sequence[Row]) -> tuple[str | None, list[dict[str, Any]]] | None:
    """The job's owner and its metrics rows from METRICS_AFTER's rows; None: no such job."""
    if not rows:
        return None
    items = [dict(zip(ROW_FIELDS, row[1:], strict=True)) for row in rows if row[1] is not None]
    return rows[0][0], items
