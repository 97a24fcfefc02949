"""Prometheus series read from the database at scrape time: jobs, queue, epochs, workers.

The database is what every API and worker process shares, so computing these when Prometheus
asks gives the same honest answer from any API process, with no counters to keep in sync.
Epoch counts and durations come from running totals (app.domain.epoch_stats), a few rows
whatever the history: a scrape never scans epoch_metric.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.db import session_factory
from app.domain import scheduler_stats
from app.domain.epoch_stats import EPOCH_BUCKETS, UNTIMED, input_totals, totals
from app.domain.states import JobStatus
from app.domain.tables import Job, Worker, utcnow
from app.schemas.job_spec import FRAMEWORKS


class DatabaseCollector(Collector):
    """Collects from one short session per scrape."""

    def collect(self) -> Iterator[Metric]:
        with session_factory()() as session:
            yield _jobs(session)
            yield from _queue(session)
            yield from _scheduler(session)
            yield from _epochs(session)
            yield from _workers(session)


def _jobs(session: Session) -> Metric:
    family = GaugeMetricFamily(
        "epochal_jobs", "Jobs by status and framework.", labels=["status", "framework"]
    )
    counts: dict[tuple[str, str], int] = {(s, f): 0 for s in JobStatus for f in FRAMEWORKS}
    query = select(Job.status, Job.framework, func.count()).group_by(Job.status, Job.framework)
    for status, framework, count in session.execute(query):
        counts[(status, framework)] = count
    for (status, framework), count in sorted(counts.items()):
        family.add_metric([str(status), framework], count)
    return family


def _queue(session: Session) -> Iterable[Metric]:
    depth, oldest = session.execute(
        select(func.count(), func.min(Job.created_at)).where(Job.status == JobStatus.queued)
    ).one()
    yield GaugeMetricFamily("epochal_queue_depth", "Jobs waiting for a worker.", value=depth)
    wait = 0.0
    if oldest is not None:
        oldest = oldest if oldest.tzinfo else oldest.replace(tzinfo=utcnow().tzinfo)
        wait = max(0.0, (utcnow() - oldest).total_seconds())
    yield GaugeMetricFamily(
        "epochal_queue_oldest_seconds", "How long the oldest queued job has waited.", value=wait
    )


def _scheduler(session: Session) -> Iterable[Metric]:
    """Queue depth per priority, preemptions, and how long claims waited in the queue."""
    depth = GaugeMetricFamily(
        "epochal_queue_depth_by_priority", "Queued jobs per priority.", labels=["priority"]
    )
    query = (
        select(Job.priority, func.count())
        .where(Job.status == JobStatus.queued)
        .group_by(Job.priority)
        .order_by(Job.priority)
    )
    for priority, count in session.execute(query):
        depth.add_metric([str(priority)], count)
    yield depth
    totals_ = scheduler_stats.read(session)
    preempted = totals_.get(scheduler_stats.PREEMPTIONS, {}).get(0, (0, 0.0))[0]
    yield CounterMetricFamily(
        "epochal_preemptions",
        "Running jobs stopped and re-queued for a higher one.",
        value=preempted,
    )
    waits = totals_.get(scheduler_stats.WAIT, {})
    pairs, running = [], 0
    for index, bound in enumerate(scheduler_stats.WAIT_BUCKETS):
        running += waits.get(index, (0, 0.0))[0]
        pairs.append((str(bound), running))
    total = sum(count for count, _ in waits.values())
    summed = sum(seconds for _, seconds in waits.values())
    wait = HistogramMetricFamily(
        "epochal_queue_wait_seconds", "How long each claimed job waited in the queue."
    )
    wait.add_metric([], [*pairs, ("+Inf", total)], summed)
    yield wait


# The input measures of streamed epochs (app.schemas.metric_row.INPUT_MEASURES), summed.
INPUT_COUNTERS = {
    "data_wait_seconds": "Time streamed epochs waited for input (each epoch's largest over "
    "ranks), summed.",
    "data_read_bytes": "Bytes streamed epochs read from the store, summed over ranks.",
    "data_cache_hits": "Shard uses of streamed epochs served from the reader's cache.",
    "data_cache_misses": "Shard uses of streamed epochs that fetched the shard from the store.",
}


def _epochs(session: Session) -> Iterable[Metric]:
    finished = CounterMetricFamily(
        "epochal_epochs_finished", "Epochs finished (metrics rows recorded).", labels=["framework"]
    )
    durations = HistogramMetricFamily(
        "epochal_epoch_duration_seconds", "Wall time of one epoch.", labels=["framework"]
    )
    inputs = {
        name: CounterMetricFamily(f"epochal_epoch_{name}", about, labels=["framework"])
        for name, about in INPUT_COUNTERS.items()
    }
    stats, summed_inputs = totals(session), input_totals(session)
    for framework in sorted(set(FRAMEWORKS) | set(stats)):
        buckets = stats.get(framework, {})
        total = sum(epochs for epochs, _ in buckets.values())
        timed = total - buckets.get(UNTIMED, (0, 0.0))[0]
        summed = sum(seconds for _, seconds in buckets.values())
        pairs, running = [], 0
        for index, bound in enumerate(EPOCH_BUCKETS):
            running += buckets.get(index, (0, 0.0))[0]
            pairs.append((str(bound), running))
        finished.add_metric([framework], total)
        durations.add_metric([framework], [*pairs, ("+Inf", timed)], summed)
        for name, family in inputs.items():
            family.add_metric([framework], summed_inputs.get(framework, {}).get(name, 0.0))
    return finished, durations, *inputs.values()


def _workers(session: Session) -> Iterable[Metric]:
    horizon = utcnow() - timedelta(seconds=3 * get_settings().heartbeat_seconds)
    live, busy, gpus = session.execute(
        select(
            func.count(),
            func.count(Worker.current_job_id),
            func.coalesce(func.sum(Worker.gpus), 0),
        ).where(Worker.heartbeat_at >= horizon)
    ).one()
    yield GaugeMetricFamily("epochal_workers_live", "Workers with a fresh heartbeat.", value=live)
    yield GaugeMetricFamily("epochal_workers_busy", "Live workers running a job.", value=busy)
    yield GaugeMetricFamily("epochal_gpus_live", "GPUs owned by live workers.", value=gpus)
