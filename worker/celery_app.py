"""The Celery worker application: JSON only, one job at a time, early recovery by lease.

Start with `epochal worker`, which picks the queues this worker's GPUs can serve.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery, signals

from app.core.config import get_settings
from app.core.db import reset_engines
from app.schemas.job_spec import FRAMEWORKS
from app.services.maintenance import MaintenanceThread
from app.services.queue import celery_config
from worker import celery_logging as logging_setup
from worker.calibration import calibrate_then
from worker.supervisor import heartbeat as workers
from worker.supervisor import shutdown
from worker.supervisor.standby import POOL, warm_up
from worker.supervisor.threads import cpu_budget

celery_app = Celery("epochal-worker", include=["worker.tasks"])
celery_app.conf.update(celery_config(get_settings()))
celery_app.conf.update(
    task_acks_late=True,  # a message is acked when its task ends; the DB claim stops duplicates
    task_reject_on_worker_lost=False,  # the lease reaper recovers, bounded by attempts (P3)
    worker_prefetch_multiplier=1,  # reserve one job, not four (P5)
    worker_concurrency=1,
    # P6 says cancel, to avoid a second copy after redelivery; here the DB claim already stops
    # that copy, and cancelling would kill a healthy trainer (it talks to the database, not
    # the broker) and cost a lease plus the epoch in flight on every Redis blip.
    worker_cancel_long_running_tasks_on_connection_loss=False,
    worker_hijack_root_logger=False,
    task_track_started=False,
)

_threads: list[Any] = []
_pools: list[Any] = []  # the consumer's task pool, to find its processes at shutdown
logging_setup.connect()


@signals.worker_process_init.connect
def _fresh_engine_after_fork(**_: Any) -> None:
    reset_engines()  # a pool child must not share the parent's DB connections (P39)
    settings = get_settings()
    # The first job starts warm too; on a machine not yet measured, the warm-up follows that.
    warm = threading.Thread(target=warm_up, args=(settings, list(FRAMEWORKS)), daemon=True)
    if not calibrate_then(settings, cpu_budget(settings), warm):
        warm_up(settings, list(FRAMEWORKS))


@signals.worker_process_shutdown.connect
def _no_waiting_children(**_: Any) -> None:
    POOL.close()


@signals.worker_ready.connect
def _start_background(sender: Any = None, **_: Any) -> None:
    settings = get_settings()
    name = sender.hostname if sender is not None else workers.worker_name(settings)
    if sender is not None:
        _pools.append(sender.pool)
    devices = workers.describe_gpus(settings.worker_gpu_ids)
    heartbeat = workers.HeartbeatThread(name, devices)
    maintenance = MaintenanceThread(settings, name="worker-maintenance")
    for thread in (heartbeat, maintenance):
        thread.start()
        _threads.append(thread)


@signals.worker_shutting_down.connect
def _stop_running_jobs(**_: Any) -> None:
    """Warm shutdown would wait out the job: its supervisor stops and re-queues it instead."""
    shutdown.end_within(shutdown.shutdown_bound(get_settings()))
    for pool in _pools:
        try:
            pids = pool.info.get("processes", [])
        except (AttributeError, TypeError):  # not started, or already gone
            continue
        shutdown.notify(pids)


@signals.worker_shutdown.connect
def _stop_background(sender: Any = None, **_: Any) -> None:
    for thread in _threads:
        thread.stop()
    if sender is not None:
        workers.forget(sender.hostname)
