"""Publishing a queued job to the broker: commit first, then publish (RELIABILITY.md P11).

While the broker is away a publish retries for seconds (queue.py's retry policy), so nothing
holds a database session through it: the reservation commits before, and a failed publish is undone
in a short session of its own after. An API request gives its DB slot back before it
publishes (`publish_new`), so other requests go on being served (RELIABILITY.md §3).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence

from sqlalchemy.orm import Session

from app.core.db import session_scope
from app.core.log_setup import job_context
from app.domain import crud, publish_reservation
from app.domain.states import JobStatus
from app.domain.tables import Job
from app.services.queue import publish_train

log = logging.getLogger(__name__)


class PublishResult(enum.Enum):
    """What publish_queued did: published, left it to another process, or found the broker down."""

    published = "published"
    taken = "taken"
    broker_down = "broker_down"


def publish_queued(session: Session, job: Job) -> PublishResult:
    """Publish the job's message once per round; the job stays queued whatever happens."""
    if not reserve(session, job):
        return PublishResult.taken
    return publish_reserved(job)


def reserve(session: Session, job: Job) -> bool:
    """Reserve the job's publish in the current round, committed (the row and its
    dispatched_at are durable before the message exists); False if another process has it."""
    if not publish_reservation.reserve_publish(session, job):
        session.rollback()
        return False
    session.commit()
    return True


def publish_reserved(job: Job) -> PublishResult:
    """Publish a reserved job's message, holding no database session while the broker retries."""
    try:
        publish_train(job.id, job.queue)
    except Exception:  # the job stays queued; the reconciler publishes it later
        with job_context(job.id):  # a submit's request has no job id yet to log with
            log.warning(
                "could not publish job %s; the reconciler will retry", job.id, exc_info=True
            )
        # Nothing was published: clear dispatched_at so the next maintenance round tries again
        # at once instead of waiting dispatch_retry_seconds for a message that never existed.
        with session_scope() as session:
            publish_reservation.release_publish(session, job)
        return PublishResult.broker_down
    return PublishResult.published


def republish(job_id: str) -> PublishResult | None:
    """Publish a job's wake-up again if it is still queued (None: it is not, or is gone)."""
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        if job is None or job.status != JobStatus.queued:
            return None
        return publish_queued(session, job)


def publish_new(jobs: Sequence[Job]) -> None:
    """Publish jobs just stored, for a caller that holds no session (an API request that gave
    its DB slot back): each reservation is a short session of its own. After one publish fails the
    rest are left to the reconciler, so a down broker costs one retry, not one per job."""
    for job in jobs:
        with session_scope() as session:
            reserved = reserve(session, job)
        if reserved and publish_reserved(job) is PublishResult.broker_down:
            return
