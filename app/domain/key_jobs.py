"""A key's jobs as a submit checks them: the job an earlier request with the same
Idempotency-Key made, and the worker seats the per-key quota counts."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.datasets import lock_owner
from app.domain.states import ACTIVE, JobStatus
from app.domain.tables import Job


def find_idempotent(session: Session, owner_id: str | None, key: str) -> Job | None:
    query = select(Job).where(Job.idempotency_key == key)
    query = (
        query.where(Job.owner_id == owner_id) if owner_id else query.where(Job.owner_id.is_(None))
    )
    return session.scalars(query).first()


def count_active(session: Session, owner_id: str) -> int:
    """Worker seats of this owner's queued or running jobs, one per node (the per-key quota
    counts these): a 16-node job holds 16 workers, as 16 jobs would.

    It first locks the owner's key row until the caller commits, so a count and the insert
    after it are atomic: on PostgreSQL FOR NO KEY UPDATE (concurrent submits of one key queue
    up, a job's foreign-key check is not blocked); SQLite's BEGIN IMMEDIATE already serializes
    every writer (app.core.db), and the clause renders as nothing there.
    """
    lock_owner(session, owner_id)
    active = (JobStatus.queued, *ACTIVE)
    query = (
        select(func.coalesce(func.sum(Job.nodes), 0))
        .select_from(Job)
        .where(Job.owner_id == owner_id, Job.status.in_(active))
    )
    return int(session.scalar(query) or 0)
