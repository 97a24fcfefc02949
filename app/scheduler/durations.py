"""How long jobs take, from what was measured: the queue's estimated start adds these up.

A running job still needs its epochs left at its own recent pace (the wall time between its
rows, so validation, checkpoints and row writes count), less what it already did of the epoch
under way, then its wind-down (final evaluation, export, the end). A job not yet started needs
its start-up (process, data, model), its epochs at its framework's mean epoch time, and the
wind-down. Start-up and wind-down are the medians of the framework's recent finished jobs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.epoch_stats import totals
from app.domain.states import ACTIVE, JobStatus
from app.domain.tables import EpochMetric, Job, UsageSpan
from app.schemas.metric_row import EPOCH_SECONDS
from app.schemas.stored_spec import stored

RECENT_EPOCHS = 5  # a running job's pace: its last few epochs (a machine's load moves)
RECENT_JOBS = 5  # start-up and wind-down: the median of the framework's last few jobs


@dataclass(frozen=True)
class Overheads:
    """A job's seconds outside its epochs: before the first (start-up), after the last."""

    startup: float = 0.0
    wind_down: float = 0.0


@dataclass(frozen=True)
class Pace:
    """A run's epochs so far: how many rows, the last one's time, seconds per epoch."""

    rows: int
    last: datetime | None
    per_epoch: float | None


def pace(session: Session, job_id: str, since: datetime | None = None) -> Pace:
    """Seconds per epoch over the last rows (of this run: the gap before a resume is no epoch)."""
    where = [EpochMetric.job_id == job_id]
    if since is not None:
        where.append(EpochMetric.recorded_at >= since)
    seconds = getattr(EpochMetric, EPOCH_SECONDS)  # a column added from METRIC_FIELDS
    recent = session.execute(
        select(EpochMetric.recorded_at, seconds)
        .where(*where)
        .order_by(EpochMetric.epoch.desc())
        .limit(RECENT_EPOCHS + 1)
    ).all()
    if not recent:
        return Pace(0, None, None)
    last, first = recent[0][0], recent[-1][0]
    if len(recent) > 1:
        per_epoch = (last - first).total_seconds() / (len(recent) - 1)
    else:
        per_epoch = recent[0][1]  # one epoch: its own measured time
    return Pace(len(recent), last, None if per_epoch is None else float(per_epoch))


def overheads(session: Session, framework: str) -> Overheads:
    """Median start-up and wind-down of the framework's last few jobs that ran through once."""
    finished = session.execute(
        select(Job.id, Job.started_at, Job.finished_at)
        .where(Job.status == JobStatus.succeeded, Job.framework == framework, Job.attempt == 1)
        .order_by(Job.created_at.desc())
        .limit(RECENT_JOBS)
    ).all()
    rows = session.execute(
        select(
            EpochMetric.job_id,
            func.count(),
            func.min(EpochMetric.recorded_at),
            func.max(EpochMetric.recorded_at),
        )
        .where(EpochMetric.job_id.in_([row.id for row in finished]))
        .group_by(EpochMetric.job_id)
    )
    spans = {job_id: (n, first, last) for job_id, n, first, last in rows}
    starts, ends = [], []
    for job_id, started, ended in finished:
        if job_id not in spans or started is None or ended is None:
            continue
        n, first, last = spans[job_id]
        ends.append(max((ended - last).total_seconds(), 0.0))
        if n > 1:  # the first row came one epoch after the training began
            per_epoch = (last - first).total_seconds() / (n - 1)
            starts.append(max((first - started).total_seconds() - per_epoch, 0.0))
    return Overheads(
        statistics.median(starts) if starts else 0.0, statistics.median(ends) if ends else 0.0
    )


def mean_epoch(session: Session, framework: str) -> float | None:
    """The framework's mean epoch time over every epoch recorded (None: none yet)."""
    buckets = totals(session).get(framework, {})
    epochs = sum(count for count, _ in buckets.values())
    return sum(seconds for _, seconds in buckets.values()) / epochs if epochs else None


def remaining(session: Session, job_id: str, now: datetime) -> float | None:
    """Seconds until a running job frees its worker (None: nothing says how long an epoch is)."""
    job = session.get(Job, job_id)
    if job is None or job.status not in ACTIVE:
        return 0.0
    costs = overheads(session, job.framework)
    left = max(stored(job.spec)["training"]["epochs"] - job.current_epoch, 0)
    opened = session.scalar(  # this usage span's start (a preempted job resumes under its attempt)
        select(func.max(UsageSpan.started)).where(
            UsageSpan.job_id == job_id, UsageSpan.ended.is_(None)
        )
    )
    run_start = None if opened is None else datetime.fromtimestamp(opened, UTC)
    ran = pace(session, job_id, run_start)
    if ran.last is not None and ran.per_epoch is not None:
        since = (now - ran.last).total_seconds()
        return max(left * ran.per_epoch + costs.wind_down - since, 0.0)
    per_epoch = mean_epoch(session, job.framework)  # still starting: its framework's pace
    if per_epoch is None:
        return None
    since = (now - run_start).total_seconds() if run_start is not None else 0.0
    whole = costs.startup + left * per_epoch + costs.wind_down
    return max(whole - since, 0.0)


def expected_seconds(session: Session, job: Job) -> float | None:
    """How long a queued job is expected to hold a worker once it starts (None: unknown)."""
    per_epoch = mean_epoch(session, job.framework)
    if per_epoch is None:
        return None
    return held(job, per_epoch, overheads(session, job.framework))


def held(job: Job, per_epoch: float, costs: Overheads) -> float:
    """expected_seconds, given its framework's mean epoch time and overheads."""
    left = max(stored(job.spec)["training"]["epochs"] - job.current_epoch, 0)  # a resume: fewer
    return costs.startup + left * per_epoch + costs.wind_down
