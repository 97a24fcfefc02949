"""Running totals of finished epochs per framework and duration bucket, kept as epochs are
recorded, so /metrics reads a handful of rows whatever the history (never epoch_metric)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.domain.tables import EpochStat, Job

EPOCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
UNTIMED = -1  # the bucket of an epoch whose duration was not recorded
OVERFLOW = len(EPOCH_BUCKETS)  # longer than the last bound (+Inf only)


def bucket_of(seconds: float | None) -> int:
    """Index of the smallest bound the duration fits under (not cumulative)."""
    if seconds is None:
        return UNTIMED
    return next((i for i, bound in enumerate(EPOCH_BUCKETS) if seconds <= bound), OVERFLOW)


def count_epoch(
    session: Session, job_id: str, seconds: float | None, data_wait: float | None = None
) -> None:
    """Add one finished epoch of this job to its framework's totals (same transaction)."""
    framework = session.scalar(select(Job.framework).where(Job.id == job_id))
    if framework is None:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    row = {"framework": framework, "bucket": bucket_of(seconds), "epochs": 1}
    wait = data_wait or 0.0
    statement = insert(EpochStat).values(**row, seconds_sum=seconds or 0.0, data_wait_sum=wait)
    statement = statement.on_conflict_do_update(
        index_elements=["framework", "bucket"],
        set_={
            "epochs": EpochStat.epochs + 1,
            "seconds_sum": EpochStat.seconds_sum + (seconds or 0.0),
            "data_wait_sum": EpochStat.data_wait_sum + wait,
        },
    )
    session.execute(statement)


def data_wait_totals(session: Session) -> dict[str, float]:
    """framework -> seconds its streamed epochs waited for input, summed."""
    query = select(EpochStat.framework, func.sum(EpochStat.data_wait_sum)).group_by(
        EpochStat.framework
    )
    return {framework: float(summed or 0.0) for framework, summed in session.execute(query)}


def totals(session: Session) -> dict[str, dict[int, tuple[int, float]]]:
    """framework -> bucket -> (epochs, seconds summed)."""
    out: dict[str, dict[int, tuple[int, float]]] = {}
    query = select(EpochStat.framework, EpochStat.bucket, EpochStat.epochs, EpochStat.seconds_sum)
    for framework, bucket, epochs, summed in session.execute(query):
        out.setdefault(framework, {})[bucket] = (int(epochs), float(summed or 0.0))
    return out
