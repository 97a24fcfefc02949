"""Deleting finished jobs and pruning what they keep: rows first, then files.

A job's rows go in one conditional DELETE (only a finished job; its transitions and epoch rows
follow by ON DELETE CASCADE), its directory after the commit: a crash between the two leaves
an orphan directory, never rows that point at missing files. With a store other than the
artifacts directory (app.storage), the job's objects there go the same way, after the commit
(a store that is down then leaves them, as a crash leaves a directory).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.db import rows_changed
from app.domain import crud
from app.domain.job_files import JobFiles, job_key
from app.domain.states import TERMINAL
from app.domain.tables import Job, utcnow
from app.storage import StoreError, get_store
from app.storage.registry import is_artifacts_dir

log = logging.getLogger(__name__)

BATCH = 500  # jobs looked at per retention round and query


def delete_job_rows(session: Session, job_id: str) -> bool:
    """The job and its rows, if it is finished (the caller commits); False otherwise."""
    return bool(
        rows_changed(session, delete(Job).where(Job.id == job_id, Job.status.in_(TERMINAL)))
    )


def remove_job_files(artifacts_dir: Path, job_id: str) -> None:
    """The job's directory under EPOCHAL_ARTIFACTS_DIR, whatever it holds, and its objects in
    the store."""
    shutil.rmtree(JobFiles.of(artifacts_dir, job_id).root, ignore_errors=True)
    remove_stored(job_key(job_id) + "/")


def remove_stored(prefix: str) -> int:
    """The store's objects under `prefix` when the store is not the artifacts directory (whose
    files the callers remove themselves); how many. A failing store leaves them, logged."""
    if is_artifacts_dir(get_settings()):
        return 0
    try:
        return get_store().delete_prefix(prefix)
    except StoreError as exc:
        log.warning("%s stays in the store: %s", prefix, exc)
        return 0


def record_disk(session: Session, artifacts_dir: Path, job_id: str) -> None:
    """What the job's directory holds now, for its key's storage quota (the caller commits)."""
    crud.set_disk_bytes(session, job_id, JobFiles.of(artifacts_dir, job_id).size_bytes())


def forget_checkpoint(session: Session, job_id: str) -> None:
    """Clear the job's latest checkpoint, committed before its sets go: the database never
    names a checkpoint being removed."""
    clear = update(Job).where(Job.id == job_id, Job.latest_checkpoint.is_not(None))
    if rows_changed(session, clear.values(latest_checkpoint=None)):
        session.commit()


def prune_checkpoints(artifacts_dir: Path, job_id: str) -> bool:
    """Drop a finished job's checkpoints (its model stays); True if there were any."""
    checkpoints = JobFiles.of(artifacts_dir, job_id).checkpoints
    stored = remove_stored(job_key(job_id, "checkpoints") + "/")
    if not checkpoints.exists():
        return stored > 0
    shutil.rmtree(checkpoints, ignore_errors=True)
    return True


def finished_before(session: Session, days: float, after_id: str = "") -> Sequence[str]:
    """Ids of jobs that ended more than `days` ago, in id order from after_id (a page)."""
    cutoff = utcnow() - timedelta(days=days)
    query = (
        select(Job.id)
        .where(Job.status.in_(TERMINAL), Job.finished_at < cutoff, Job.id > after_id)
        .order_by(Job.id)
        .limit(BATCH)
    )
    return session.scalars(query).all()


def ended_since(session: Session, since: datetime) -> Sequence[str]:
    """Ids of the jobs that ended at or after `since` (what the store's cleaner looks at)."""
    query = select(Job.id).where(Job.status.in_(TERMINAL), Job.finished_at >= since)
    return session.scalars(query.order_by(Job.id)).all()


def apply_retention(session: Session, artifacts_dir: Path, days: float, delete_jobs: bool) -> int:
    """Prune (or delete) every job finished more than `days` ago; how many were touched."""
    touched, after = 0, ""
    while ids := finished_before(session, days, after):
        after = ids[-1]
        for job_id in ids:
            if delete_jobs:
                if delete_job_rows(session, job_id):
                    session.commit()
                    remove_job_files(artifacts_dir, job_id)
                    touched += 1
                continue
            forget_checkpoint(session, job_id)
            if prune_checkpoints(artifacts_dir, job_id):
                record_disk(session, artifacts_dir, job_id)
                session.commit()
                touched += 1
    return touched
