"""Sending a queued job to the broker: commit first, then publish (reliability P11)."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from app import crud
from app.models import Job
from app.queue import send_train

log = logging.getLogger(__name__)


def dispatch(session: Session, job: Job) -> bool:
    """Publish the job's message once per round; False if another process is sending it."""
    if not crud.claim_dispatch(session, job):
        session.rollback()
        return False
    session.commit()  # the row (and its dispatched_at) is durable before the message exists
    try:
        send_train(job.id, job.queue)
    except Exception:  # the job stays queued; the reconciler sends it later
        log.warning("could not publish job %s; the reconciler will retry", job.id, exc_info=True)
        return False
    return True
