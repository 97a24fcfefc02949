"""Running totals of finished epochs per framework and duration bucket, kept as epochs are
recorded, so /metrics reads a handful of rows whatever the history (never epoch_metric)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.domain.tables import EpochStat, Job
from app.schemas.metric_row import EPOCH_SECONDS

EPOCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
UNTIMED = -1  # the bucket of an epoch whose duration was not recorded
OVERFLOW = len(EPOCH_BUCKETS)  # longer than the last bound (+Inf only)


def bucket_of(seconds: float | None) -> int:
    """Index of the smallest bound the duration fits under (not cumulative)."""
    if seconds is None:
        return UNTIMED
    return next((i for i, bound in enumerate(EPOCH_BUCKETS) if seconds <= bound), OVERFLOW)


# Each input measure of a row (app.schemas.metric_row.INPUT_MEASURES) and its total's column.
INPUT_SUMS = {
    "data_wait_seconds": "data_wait_sum",
    "data_read_bytes": "data_read_bytes_sum",
    "data_cache_hits": "data_cache_hits_sum",
    "data_cache_misses": "data_cache_misses_sum",
}


def count_epoch(session: Session, job_id: str, values: Mapping[str, float | None]) -> None:
    """Add one finished epoch of this job (its row's values) to its framework's totals, in the
    same transaction."""
    framework = session.scalar(select(Job.framework).where(Job.id == job_id))
    if framework is None:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    seconds = values.get(EPOCH_SECONDS)
    row = {"framework": framework, "bucket": bucket_of(seconds), "epochs": 1}
    sums = {column: values.get(name) or 0.0 for name, column in INPUT_SUMS.items()}
    statement = insert(EpochStat).values(**row, seconds_sum=seconds or 0.0, **sums)
    statement = statement.on_conflict_do_update(
        index_elements=["framework", "bucket"],
        set_={
            "epochs": EpochStat.epochs + 1,
            "seconds_sum": EpochStat.seconds_sum + (seconds or 0.0),
            **{column: getattr(EpochStat, column) + add for column, add in sums.items()},
        },
    )
    session.execute(statement)


def input_totals(session: Session) -> dict[str, dict[str, float]]:
    """framework -> input measure (data_wait_seconds, data_read_bytes, …) -> its sum over the
    framework's streamed epochs."""
    columns = [func.sum(getattr(EpochStat, column)) for column in INPUT_SUMS.values()]
    query = select(EpochStat.framework, *columns).group_by(EpochStat.framework)
    return {
        framework: {name: float(v or 0.0) for name, v in zip(INPUT_SUMS, sums, strict=True)}
        for framework, *sums in session.execute(query)
    }


def totals(session: Session) -> dict[str, dict[int, tuple[int, float]]]:
    """framework -> bucket -> (epochs, seconds summed)."""
    out: dict[str, dict[int, tuple[int, float]]] = {}
    query = select(EpochStat.framework, EpochStat.bucket, EpochStat.epochs, EpochStat.seconds_sum)
    for framework, bucket, epochs, summed in session.execute(query):
        out.setdefault(framework, {})[bucket] = (int(epochs), float(summed or 0.0))
    return out
