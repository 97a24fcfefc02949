"""Keeping the queue honest: reap lost workers, re-publish lost messages, expire waiting jobs;
and, once an interval, the retention and the store's cleaner.

Runs as a thread in every API and worker process. Each change is a conditional UPDATE, so many
copies running at once do no harm (RELIABILITY.md P2, P7, P11); the cleaner's deletes are as
idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import session_scope
from app.core.log_setup import job_context
from app.domain import crud, dataset_uploads, retention, usage, worker_reads
from app.domain.dataset_uploads import UPLOADS_PREFIX
from app.domain.job_files import job_key
from app.domain.states import ErrorCode, JobStatus, RequeueCause, StopReason
from app.domain.tables import Job, utcnow
from app.scheduler import gang, standings
from app.scheduler.preempt import preempt_round
from app.schemas.stored_spec import stored
from app.services import ingest_lease, sweeps
from app.services.publish import PublishResult, publish_queued, republish
from app.services.queue import publish_ingest
from app.storage import get_store
from app.storage.base import StoreUnavailable
from app.storage.checkpoint_sets import CheckpointSets
from app.storage.cleaner import Cleaned, abort_stale_uploads, remove_partial_checkpoints
from app.storage.registry import is_artifacts_dir

log = logging.getLogger(__name__)
# Jobs that ended this long before the grace period are looked at no more: the cleaner's rounds
# since had every chance to remove what their writers left.
CLEAN_WINDOW = timedelta(days=1)


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
                stop_reason=StopReason.cancelled,
                reason="worker lost while cancelling",
            )
        elif job.attempt <= job.max_restarts:
            done = crud.requeue(session, job, RequeueCause.lost)
            if done:
                session.commit()
                publish_queued(session, job)
        else:
            done = crud.finish_job(
                session,
                job.id,
                job.attempt,
                JobStatus.failed,
                stop_reason=StopReason.worker_lost,
                error_code=ErrorCode.worker_lost,
                reason="worker lost; max_restarts reached",
                error=(
                    f"the worker running attempt {job.attempt} stopped renewing its lease and "
                    f"max_restarts={job.max_restarts} is used up; resubmit to try again"
                ),
            )
        count += bool(done)
    return count


def _needs_publishing(session: Session, job: Job, settings: Settings) -> bool:
    """Never sent, or sent long ago while a fitting worker sits idle: the message is gone.

    An idle live worker that consumes the job's queue takes a waiting message within
    moments, so a job still queued dispatch_retry_seconds after its last send, while such a
    worker idles, has lost its message (a broker restarted empty, P7). A wrong guess costs one
    duplicate message that the claim ignores; re-publishes are at most one per job per
    dispatch_retry_seconds and happen only while a fitting worker is idle (bounded).
    """
    if job.dispatched_at is None:
        return True
    if utcnow() - job.dispatched_at < timedelta(seconds=settings.dispatch_retry_seconds):
        return False
    idle = [
        w
        for w in worker_reads.live_workers(session, 3 * settings.heartbeat_seconds)
        if w.gpus >= job.gpus and w.current_job_id is None
    ]
    return len(idle) >= job.nodes  # a gang's message waits for enough free workers


def _queue_expired(job: Job) -> int | None:
    """max_queue_seconds, if this job has waited longer for its first start."""
    limit = stored(job.spec).get("max_queue_seconds")
    # Only a job that never started: one re-queued after a lost worker is bounded by
    # max_restarts instead, and its age says nothing about its wait.
    if limit and job.attempt == 0 and utcnow() - job.created_at > timedelta(seconds=limit):
        return int(limit)
    return None


def expire_and_republish(session: Session, settings: Settings) -> None:
    """Fail jobs past max_queue_seconds; re-publish the ones whose message is gone."""
    broker_down = False
    for job in crud.queued_jobs(session):
        limit = _queue_expired(job)
        if limit is not None:
            crud.force_fail_queued(
                session,
                job,
                ErrorCode.queue_timeout,
                f"not started within max_queue_seconds={limit}; no fitting worker was free",
            )
            session.commit()
        elif not broker_down and _needs_publishing(session, job, settings):
            sent = publish_queued(session, job)
            # One failed publish says the broker is down: spare the others the wait in the
            # current round.
            broker_down = sent is PublishResult.broker_down
            if sent is PublishResult.published:
                with job_context(job.id):  # a line about a job carries its id
                    log.info("re-sent job %s to %s", job.id, job.queue)


def release_gangs(settings: Settings) -> None:
    """Gangs that cannot form (a seat lapsed) or whose job ended let their workers go."""
    with session_scope() as session:
        woken = gang.dissolve_stale(session, settings)
    for job_id in woken:
        republish(job_id)


def run_once(settings: Settings) -> None:
    with session_scope() as session:
        reap_lost_workers(session)
    release_gangs(settings)
    with session_scope() as session:  # make room for a queued job far above a running one
        preempt_round(session, settings)
    with session_scope() as session:
        expire_and_republish(session, settings)
    with session_scope() as session:  # a sweep whose trial ended unseen (e.g. reaped) goes on
        sweeps.top_up_unfinished(session)
    with session_scope() as session:  # an ingest whose worker or message was lost
        for dataset_id in ingest_lease.lost(session, settings):
            publish_ingest(dataset_id)
    # Whatever the steps above or other processes changed: every process runs a round, and
    # one refresh per half round is enough to keep each standing within a round of the truth.
    standings.refresh(settings, unless_within=settings.maintenance_seconds / 2)


def apply_retention(settings: Settings) -> int:
    """EPOCHAL_RETENTION_DAYS: prune (or delete) jobs that ended that long ago; how many.
    Runs no fair share counts any more (older than its window) go whatever it says."""
    with session_scope() as session:
        usage.prune(session, settings.fair_share_window_seconds)
    if settings.retention_days is None:
        return 0
    with session_scope() as session:
        return retention.apply_retention(
            session,
            settings.resolved_artifacts_dir,
            settings.retention_days,
            settings.retention_delete_jobs,
        )


def clean_store(settings: Settings, now: datetime | None = None) -> Cleaned:
    """What dead writers left in the store (app.storage.cleaner), once older than
    EPOCHAL_STORE_CLEAN_GRACE_SECONDS: multipart uploads never completed, anywhere in it, and
    the checkpoint prefixes without a manifest of jobs that have ended; and the resumable data
    set uploads no part has reached for EPOCHAL_DATASET_UPLOAD_EXPIRY_SECONDS.

    A set being written is never removed: only a job's running attempt writes its sets (and
    prunes its own leftovers, worker.training.checkpoint_upload), so a job still queued or
    running is not looked at; an ended job's writer is gone, and the grace period, longer than
    a checkpoint takes to upload, covers one that has not noticed yet. With the default store
    (the artifacts directory) only the uploads: its checkpoints are the workers' staging,
    whose folders have no set manifest."""
    now = now or datetime.now(UTC)
    older_than = now - timedelta(seconds=settings.store_clean_grace_seconds)
    store = get_store()
    cleaned = Cleaned(uploads=abort_stale_uploads(store, "", older_than, skip=UPLOADS_PREFIX))
    expiry = now - timedelta(seconds=settings.dataset_upload_expiry_seconds)
    with session_scope() as session:  # resumable data set uploads: by their last part
        cleaned.uploads += dataset_uploads.expire(session, store, expiry)
    if is_artifacts_dir(settings):
        return cleaned
    with session_scope() as session:
        ended = retention.ended_since(session, older_than - CLEAN_WINDOW)
    for job_id in ended:
        sets = CheckpointSets(store, job_key(job_id, "checkpoints"))
        removed = remove_partial_checkpoints(sets, older_than)
        cleaned.prefixes += [f"{sets.root}{name}/" for name in removed]
    if cleaned.prefixes or cleaned.uploads:
        log.info(
            "store cleaned: %d checkpoint prefixes without a manifest, %d stale uploads",
            len(cleaned.prefixes),
            len(cleaned.uploads),
        )
    return cleaned


class MaintenanceThread(threading.Thread):
    """Calls run_once every maintenance_seconds, and the retention once an interval."""

    def __init__(self, settings: Settings, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.settings, self._stop_event = settings, threading.Event()

    def run(self) -> None:
        retained_at = float("-inf")  # the first round applies it
        while not self._stop_event.wait(self.settings.maintenance_seconds):
            try:
                run_once(self.settings)
                if time.monotonic() - retained_at >= self.settings.retention_interval_seconds:
                    retained_at = time.monotonic()
                    self.clean_store()  # never raises: the retention runs whatever it meets
                    apply_retention(self.settings)
            except Exception:  # a DB or broker hiccup must not end the thread
                log.warning("maintenance round failed", exc_info=True)

    def clean_store(self) -> None:
        try:
            clean_store(self.settings)
        except StoreUnavailable as exc:  # an outage, not a fault: cleaned next interval
            log.warning("the store's cleaning waits for the store: %s", exc)
        except Exception:
            log.warning("the store's cleaning failed", exc_info=True)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
