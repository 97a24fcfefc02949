"""Sweep rows and their trial jobs: store, list, lock, and the per-trial figures the API shows."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, tuple_, update
from sqlalchemy.orm import Session, load_only

from app.core.config import get_settings
from app.domain.datasets import lock_owner
from app.domain.paging import decode_cursor, encode_cursor
from app.domain.states import TERMINAL, JobStatus, SweepStatus
from app.domain.tables import EpochMetric, Job, Sweep, utcnow


def create_sweep(session: Session, name: str, spec: dict[str, Any], owner_id: str | None) -> Sweep:
    """Store a new running sweep (the caller commits; its trials come from the controller)."""
    sweep = Sweep(name=name, spec=spec, owner_id=owner_id, status=SweepStatus.running)
    session.add(sweep)
    session.flush()
    return sweep


def list_sweeps(
    session: Session, *, limit: int, cursor: str | None = None, owner_id: str | None = None
) -> tuple[list[Sweep], str | None]:
    """Newest first, paged like /v1/jobs (the same cursor format)."""
    query = select(Sweep).order_by(Sweep.created_at.desc(), Sweep.id.desc()).limit(limit + 1)
    if owner_id:
        query = query.where(Sweep.owner_id == owner_id)
    if cursor:
        created, sweep_id = decode_cursor(cursor)
        query = query.where(tuple_(Sweep.created_at, Sweep.id) < tuple_(created, sweep_id))
    rows = list(session.scalars(query))
    next_cursor = encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], next_cursor


@contextmanager
def locked(session: Session, sweep_id: str) -> Iterator[Sweep | None]:
    """Hold the sweep so that one process at a time decides its next trials.

    PostgreSQL: the row, FOR NO KEY UPDATE, until the session commits (a trial's insert
    takes KEY SHARE on it for its foreign key, which this does not block). SQLite: a file
    lock beside the database, because a held write transaction would block Optuna's own
    connection; every writer of the embedded default is on this machine anyway.
    """
    if session.get_bind().dialect.name == "postgresql":
        query = select(Sweep).where(Sweep.id == sweep_id).with_for_update(key_share=True)
        yield session.scalars(query).first()
        return
    folder = get_settings().resolved_home / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"sweep-{sweep_id}.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            sweep = session.get(Sweep, sweep_id, populate_existing=True)
            session.commit()  # SQLite's BEGIN IMMEDIATE must not stay open under Optuna's writes
            yield sweep
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def yield_to_optuna(session: Session) -> None:
    """Before an Optuna call: on SQLite end our transaction so Optuna's connection can write
    (the file lock still holds the sweep); on PostgreSQL keep it, it holds the row lock."""
    if session.get_bind().dialect.name != "postgresql":
        session.commit()


def trial_jobs(session: Session, sweep_id: str) -> Sequence[Job]:
    """The sweep's trial jobs, by trial number."""
    query = select(Job).where(Job.sweep_id == sweep_id).order_by(Job.sweep_trial, Job.created_at)
    return session.scalars(query).all()


def trial_outcomes(session: Session, sweep_ids: Sequence[str]) -> Sequence[Job]:
    """The trial jobs of these sweeps with only what their state needs (no spec, no result)."""
    if not sweep_ids:
        return []
    columns = load_only(Job.id, Job.sweep_id, Job.status, Job.stop_reason)
    query = select(Job).options(columns).where(Job.sweep_id.in_(sweep_ids))
    return session.scalars(query).all()


def objective_by_job(
    session: Session, job_ids: Sequence[str], metric: str, direction: str
) -> dict[str, float]:
    """The best value of the objective over each job's epochs (one grouped query)."""
    if not job_ids:
        return {}
    column = getattr(EpochMetric, metric)
    best = func.max(column) if direction == "max" else func.min(column)
    query = (
        select(EpochMetric.job_id, best)
        .where(EpochMetric.job_id.in_(job_ids))
        .group_by(EpochMetric.job_id)
    )
    return {job_id: float(value) for job_id, value in session.execute(query) if value is not None}


@dataclass(frozen=True)
class TrialOf:
    """What the training child needs to report a trial's epochs."""

    sweep_id: str
    number: int
    spec: dict[str, Any]


def trial_of(session: Session, job_id: str) -> TrialOf | None:
    """The sweep trial this job is, or None for an ordinary job (one indexed read)."""
    query = (
        select(Job.sweep_id, Job.sweep_trial, Sweep.spec)
        .join(Sweep, Sweep.id == Job.sweep_id)
        .where(Job.id == job_id)
    )
    row = session.execute(query).first()
    if row is None or row[1] is None:
        return None
    return TrialOf(row[0], int(row[1]), row[2])


def fail(session: Session, sweep_id: str, why: str) -> None:
    """End a sweep that cannot go on: failed, with the reason, and no longer topped up (its
    trials still queued or running end as ordinary jobs do). The caller commits."""
    now = utcnow()
    session.execute(
        update(Sweep)
        .where(Sweep.id == sweep_id, Sweep.finished_at.is_(None))
        .values(status=SweepStatus.failed, error=why, finished_at=now, updated_at=now)
    )


class TooManySweeps(Exception):
    """The key has EPOCHAL_MAX_OPEN_SWEEPS_PER_KEY unfinished sweeps (a 429)."""


def check_open_sweeps(session: Session, owner_id: str | None, lock: bool = False) -> None:
    """TooManySweeps when the key may not start another sweep now. With `lock`, the key's row
    is held until the commit, so a count and the insert after it are atomic."""
    limit = get_settings().max_open_sweeps_per_key
    if owner_id is None or not limit:
        return
    if lock:
        lock_owner(session, owner_id)
    query = select(func.count()).where(Sweep.owner_id == owner_id, Sweep.finished_at.is_(None))
    if int(session.scalar(query) or 0) >= limit:
        raise TooManySweeps(
            f"this key has {limit} unfinished sweeps (EPOCHAL_MAX_OPEN_SWEEPS_PER_KEY); "
            "cancel one or wait for one to finish"
        )


def owner_job_ended_since(session: Session, owner_id: str | None, since: datetime) -> bool:
    """Whether a job of this key ended after `since` (one indexed read)."""
    query = select(Job.id).where(Job.owner_id == owner_id, Job.finished_at > since).limit(1)
    return session.scalar(query) is not None


def unfinished_sweeps(session: Session) -> Sequence[Sweep]:
    return session.scalars(select(Sweep).where(Sweep.finished_at.is_(None))).all()


def trial_counts(session: Session, sweep_id: str) -> tuple[int, int]:
    """(trials not ended, trials ended) from the jobs themselves: one grouped read."""
    query = select(Job.status, func.count()).where(Job.sweep_id == sweep_id).group_by(Job.status)
    ended = active = 0
    for status, count in session.execute(query):
        if JobStatus(status) in TERMINAL:
            ended += int(count)
        else:
            active += int(count)
    return active, ended
