"""Reads behind the routes that are polled most, as SQLAlchemy Core: one statement each, built
once per shape with named parameters (making a statement cost more than running it), rows in
as plain tuples (app.core.async_db runs them), JSON-ready dicts out."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import orjson
from sqlalchemy import Integer, Select, String, Text, and_, bindparam, cast, select, tuple_

from app.domain.paging import cursor_after, decode_cursor
from app.domain.tables import EpochMetric, Job, UTCDateTime
from app.schemas.api import JobSummary
from app.schemas.metric_row import ROW_FIELDS, spec_best_field

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
        # conditions made PostgreSQL walk the index from the newest job (8.9 ms vs 0.05 ms
        # half way through 100k jobs).
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
    values["epochs"], values["tags"] = spec["training"]["epochs"], spec.get("tags") or {}
    values["best_metric_name"] = spec_best_field(spec)
    return {name: values[name] for name in SUMMARY_FIELDS}


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
