"""Fill a database fast: N finished jobs with E epochs of metrics each (bulk inserts, COPY on
PostgreSQL), so read paths can be measured against a realistic table size."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import insert
from sqlalchemy.engine import Engine

from app.domain.epoch_stats import bucket_of
from app.domain.tables import EpochStat, Job, JobTransition
from app.schemas.job_spec import JobSpec

# Stored as the API stores a submitted spec: validated, its defaults filled in. The API's hot
# reads take fields such as dataset.validation_split straight from the stored spec
# (app.schemas.stored_spec), so a spec stored as written would fail there.
SPEC = JobSpec.model_validate(
    {
        "name": "bench",
        "framework": "pytorch",
        "task": "classification",
        "dataset": {"name": "digits"},
        "training": {"epochs": 1000, "batch_size": 32, "seed": 1},
        "tags": {},
    }
).model_dump(mode="json")
METRIC_COLUMNS = (
    "job_id",
    "epoch",
    "attempt",
    "train_loss",
    "train_accuracy",
    "val_loss",
    "val_accuracy",
    "learning_rate",
    "epoch_seconds",
    "samples_per_second",
    "recorded_at",
)
BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)
EPOCH_SECONDS = 1.5  # each seeded row's epoch_seconds


def job_rows(count: int, start: int, status: str = "succeeded") -> list[dict[str, object]]:
    rows = []
    for i in range(start, start + count):
        created = BASE_TIME + timedelta(seconds=i)
        rows.append(
            {
                "id": str(uuid.UUID(int=i + 1)),
                "name": f"bench-{i}",
                "framework": "pytorch",
                "status": status,
                "spec": SPEC,
                "queue": "gpus-0",
                "gpus": 0,
                "attempt": 1,
                "max_restarts": 2,
                "current_epoch": 0,
                "created_at": created,
                "updated_at": created,
            }
        )
    return rows


def insert_jobs(engine: Engine, count: int, start: int = 0, status: str = "succeeded") -> list[str]:
    rows = job_rows(count, start, status)
    with engine.begin() as conn:
        for begin in range(0, len(rows), 5000):
            conn.execute(insert(Job), rows[begin : begin + 5000])
    return [str(r["id"]) for r in rows]


def insert_transitions(engine: Engine, job_ids: list[str]) -> None:
    """The three transitions of a job that ran once and succeeded."""
    steps = ((None, "queued", "submitted"), ("queued", "running", "claimed by w1"))
    steps += (("running", "succeeded", "all epochs done"),)
    rows = [
        {"job_id": job_id, "from_status": old, "to_status": new, "reason": why, "attempt": 1}
        | {"at": BASE_TIME + timedelta(seconds=n)}
        for job_id in job_ids
        for n, (old, new, why) in enumerate(steps)
    ]
    with engine.begin() as conn:
        conn.execute(insert(JobTransition), rows)


def metric_tuples(job_ids: list[str], epochs: int):  # type: ignore[no-untyped-def]
    stamp = BASE_TIME.isoformat()
    for job_id in job_ids:
        for epoch in range(1, epochs + 1):
            loss = 1.0 / epoch
            yield (
                job_id,
                epoch,
                1,
                loss,
                1 - loss / 2,
                loss * 1.1,
                1 - loss / 1.8,
                0.001,
                EPOCH_SECONDS,
                40000.0,
                stamp,
            )


def insert_metrics(engine: Engine, job_ids: list[str], epochs: int) -> None:
    """One row per (job, epoch): COPY on PostgreSQL, executemany on SQLite."""
    if engine.dialect.name == "postgresql":
        _copy_metrics(engine, job_ids, epochs)
        return
    placeholders = ",".join("?" * len(METRIC_COLUMNS))
    sql = f"INSERT INTO epoch_metric ({','.join(METRIC_COLUMNS)}) VALUES ({placeholders})"
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("BEGIN")
        rows = list(metric_tuples(job_ids, epochs))
        sqlite_stamp = BASE_TIME.strftime("%Y-%m-%d %H:%M:%S.%f")  # SQLAlchemy's SQLite format
        cursor.executemany(sql, [r[:-1] + (sqlite_stamp,) for r in rows])
        cursor.execute("COMMIT")
    finally:
        raw.close()


def insert_epoch_stats(engine: Engine, epochs: int) -> None:
    """The framework's epoch totals as `epochs` seeded rows would have left them: the API keeps
    them as epochs are recorded, and the scheduler's estimates read them, not the rows."""
    row = {"framework": SPEC["framework"], "bucket": bucket_of(EPOCH_SECONDS), "epochs": epochs}
    with engine.begin() as conn:
        conn.execute(insert(EpochStat), [row | {"seconds_sum": epochs * EPOCH_SECONDS}])


def _copy_metrics(engine: Engine, job_ids: list[str], epochs: int) -> None:
    raw = engine.raw_connection()
    try:
        with (
            raw.cursor() as cursor,
            cursor.copy(  # type: ignore[attr-defined]
                f"COPY epoch_metric ({','.join(METRIC_COLUMNS)}) FROM STDIN"
            ) as copy,
        ):
            buffer = io.StringIO()
            for row in metric_tuples(job_ids, epochs):
                buffer.write("\t".join(map(str, row)) + "\n")
                if buffer.tell() > 1 << 20:
                    copy.write(buffer.getvalue())
                    buffer = io.StringIO()
            copy.write(buffer.getvalue())
        raw.commit()
    finally:
        raw.close()
