"""Per-epoch metrics rows: an upsert per (job, epoch) fenced by the attempt that owns the job,
forgotten past a checkpoint when an attempt resumes, read after `since_epoch`; and the job's
latest checkpoint, moved under the same fence."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.domain.epoch_stats import count_epoch
from app.domain.states import ACTIVE
from app.domain.tables import EpochMetric, Job, utcnow
from app.schemas.metric_row import METRIC_FIELDS


def clean(value: Any) -> float | None:
    """Non-finite metric values are stored and served as null, never break JSON."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def record_epoch(
    session: Session,
    job_id: str,
    attempt: int,
    epoch: int,
    logs: Mapping[str, Any],
    best: tuple[int, float | None] | None = None,
) -> bool:
    """Upsert the epoch's row and progress, fenced by attempt; False if the job is not ours."""
    owned = rows_changed(
        session,
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.status.in_(ACTIVE))
        .values(
            current_epoch=epoch,
            **({"best_epoch": best[0], "best_metric": clean(best[1])} if best else {}),
        ),
    )
    if not owned:
        return False
    values = {field: clean(logs.get(field)) for field in METRIC_FIELDS}
    row = {"job_id": job_id, "epoch": epoch, "attempt": attempt, "recorded_at": utcnow(), **values}
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(EpochMetric).values(**row)
    statement = statement.on_conflict_do_update(
        index_elements=["job_id", "epoch"],
        set_={key: statement.excluded[key] for key in row if key not in ("job_id", "epoch")},
    )
    session.execute(statement)
    # /metrics reads these totals
    count_epoch(session, job_id, values)
    return True


def drop_metrics_after(session: Session, job_id: str, attempt: int, epoch: int) -> int | None:
    """Forget rows past a checkpoint (a resumed attempt writes them again), fenced by attempt
    like record_epoch: None, and nothing deleted, when the job is not this attempt's. A lost
    attempt whose delete arrived late would otherwise erase its successor's rows."""
    owned = rows_changed(
        session,
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.status.in_(ACTIVE))
        .values(current_epoch=epoch),
    )
    if not owned:
        return None
    return rows_changed(
        session, delete(EpochMetric).where(EpochMetric.job_id == job_id, EpochMetric.epoch > epoch)
    )


def record_checkpoint(session: Session, job_id: str, attempt: int, name: str) -> bool:
    """Point the job at the checkpoint set `name`, whose manifest is in the store, fenced by
    attempt like record_epoch; False, and nothing moved, when the job is not this attempt's."""
    return bool(
        rows_changed(
            session,
            update(Job)
            .where(Job.id == job_id, Job.attempt == attempt, Job.status.in_(ACTIVE))
            .values(latest_checkpoint=name),
        )
    )


def read_metrics(
    session: Session, job_id: str, since_epoch: int = 0, limit: int = 1000
) -> Sequence[EpochMetric]:
    query = (
        select(EpochMetric)
        .where(EpochMetric.job_id == job_id, EpochMetric.epoch > since_epoch)
        .order_by(EpochMetric.epoch)
        .limit(limit)
    )
    return session.scalars(query).all()
