"""Sending a queued job to the broker: commit first, then publish (RELIABILITY.md P11)."""

from __future__ import annotations

import enum
import logging

from sqlalchemy.orm import Session

from app.domain import crud
from app.domain.tables import Job
from app.services.queue import send_train

log = logging.getLogger(__name__)


class Sent(enum.Enum):
    """What dispatch did: published, left it to another process, or found the broker down."""

    published = "published"
    taken = "taken"
    broker_down = "broker_down"


def dispatch(session: Session, job: Job) -> Sent:
    """Publish the job's message once per round; the job stays queued whatever happens."""
    if not crud.claim_dispatch(session, job):
        session.rollback()
        return Sent.taken
    session.commit()  # the row (and its dispatched_at) is durable before the message exists
    try:
        send_train(job.id, job.queue)
    except Exception:  # the job stays queued; the reconciler sends it later
        log.warning("could not publish job %s; the reconciler will retry", job.id, exc_info=True)
        # Nothing was sent: clear dispatched_at so the next maintenance round tries again
        # at once instead of waiting dispatch_retry_seconds for a message that never existed.
        crud.release_dispatch(session, job)
        session.commit()
        return Sent.broker_down
    return Sent.published
