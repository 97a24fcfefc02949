"""The scheduler's running totals for /metrics: how long claims waited, how many preemptions.

Kept as they happen, in the transaction of the claim or the re-queue, so a scrape reads a few
rows (like app.domain.epoch_stats) and every API process gives the same answer.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.domain.states import JobStatus
from app.domain.tables import JobTransition, SchedulerStat, utcnow

WAIT = "wait"  # one row per WAIT_BUCKETS index (not cumulative), then OVERFLOW
PREEMPTIONS = "preemptions"  # bucket 0 only
WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
OVERFLOW = len(WAIT_BUCKETS)


def _add(session: Session, name: str, bucket: int, seconds: float) -> None:
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(SchedulerStat).values(name=name, bucket=bucket, count=1, seconds_sum=seconds)
    statement = statement.on_conflict_do_update(
        index_elements=["name", "bucket"],
        set_={
            "count": SchedulerStat.count + 1,
            "seconds_sum": SchedulerStat.seconds_sum + seconds,
        },
    )
    session.execute(statement)


def count_wait(session: Session, job_id: str) -> None:
    """A claim: how long the job waited since it was last queued."""
    since = session.scalar(
        select(JobTransition.at)
        .where(JobTransition.job_id == job_id, JobTransition.to_status == JobStatus.queued)
        .order_by(JobTransition.id.desc())
        .limit(1)
    )
    seconds = max((utcnow() - since).total_seconds(), 0.0) if since is not None else 0.0
    bucket = next((i for i, bound in enumerate(WAIT_BUCKETS) if seconds <= bound), OVERFLOW)
    _add(session, WAIT, bucket, seconds)


def count_preemption(session: Session) -> None:
    _add(session, PREEMPTIONS, 0, 0.0)


def read(session: Session) -> dict[str, dict[int, tuple[int, float]]]:
    """name -> bucket -> (count, seconds summed)."""
    out: dict[str, dict[int, tuple[int, float]]] = {}
    rows = select(
        SchedulerStat.name, SchedulerStat.bucket, SchedulerStat.count, SchedulerStat.seconds_sum
    )
    for name, bucket, count, summed in session.execute(rows):
        out.setdefault(name, {})[bucket] = (int(count), float(summed))
    return out
