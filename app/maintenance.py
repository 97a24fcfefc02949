"""Keeping the queue honest: reap lost workers, re-send lost messages, expire waiting jobs.

Runs as a thread in every API and worker process. Each change is a conditional UPDATE, so many
copies running at once do no harm (reference/reliability.md P2, P7, P11).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from sqlalchemy.orm import Session

from app import crud
from app.config import Settings
from app.db import session_scope
from app.dispatch import dispatch
from app.models import Job, JobStatus, utcnow

log = logging.getLogger(__name__)


def reap_lost_workers(session: Session) -> int:
    """Jobs whose lease ran out: retry within max_restarts, else fail as worker_lost."""
    count = 0
    for job in crud.expired_leases(session):
        if job.status == JobStatus.cancelling:
            done = crud.finish_job(
                session,
                job.id,
                job.attempt,
                JobStatus.cancelled,
                stop_reason="cancelled",
                reason="worker lost while cancelling",
            )
        elif job.attempt <= job.max_restarts:
            done = crud.requeue(session, job, f"worker lost (lease expired), attempt {job.attempt}")
            if done:
                session.commit()
                dispatch(session, job)
        else:
            done = crud.finish_job(
                session,
                job.id,
                job.attempt,
                JobStatus.failed,
                stop_reason="worker_lost",
                error_code="worker_lost",
                reason="worker lost; max_restarts reached",
                error=f"worker lost {job.attempt} times; max_restarts is {job.max_restarts}",
            )
        count += bool(done)
    return count


def _needs_sending(session: Session, job: Job, settings: Settings) -> bool:
    """Never sent, or sent long ago while a fitting worker sits idle: the message is gone."""
    if job.dispatched_at is None:
        return True
    if utcnow() - job.dispatched_at < timedelta(seconds=settings.dispatch_retry_seconds):
        return False
    idle = [
        w
        for w in crud.live_workers(session, 3 * settings.heartbeat_seconds)
        if w.gpus >= job.gpus and w.current_job_id is None
    ]
    return bool(idle)


def expire_and_redispatch(session: Session, settings: Settings) -> None:
    """Fail jobs past max_queue_seconds; re-send the ones whose message is gone."""
    for job in crud.queued_jobs(session):
        limit = job.spec.get("max_queue_seconds")
        if limit and utcnow() - job.created_at > timedelta(seconds=limit):
            crud.force_fail_queued(
                session, job, "queue_timeout", f"not started within max_queue_seconds={limit}"
            )
            session.commit()
        elif _needs_sending(session, job, settings) and dispatch(session, job):
            log.info("re-sent job %s to %s", job.id, job.queue)


def run_once(settings: Settings) -> None:
    with session_scope() as session:
        reap_lost_workers(session)
    with session_scope() as session:
        expire_and_redispatch(session, settings)


class MaintenanceThread(threading.Thread):
    """Calls run_once every maintenance_seconds until stopped."""

    def __init__(self, settings: Settings, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.settings, self._stop_event = settings, threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.settings.maintenance_seconds):
            try:
                run_once(self.settings)
            except Exception:  # a DB or broker hiccup must not end the thread
                log.warning("maintenance round failed", exc_info=True)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
