"""Revoking a key ends what it set going: its running sweeps stop launching trials and its
unfinished jobs are cancelled (a queued one at once, a running one at its next step boundary,
as POST /v1/jobs/{id}/cancel does), so a key that may no longer call the API no longer holds
workers or a place in the queue. What it made stays: finished jobs, models, data sets."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain import crud, keys
from app.domain.states import TERMINAL, JobStatus, SweepStatus
from app.domain.tables import Job, Sweep
from app.services import sweeps


@dataclass(frozen=True)
class Ended:
    """What a revocation stopped."""

    sweeps: int  # running sweeps cancelled (their trials with them)
    jobs: int  # other unfinished jobs cancelled, or asked to stop


def revoke_key(session: Session, key_id: str) -> Ended | None:
    """Revoke the key and end its work; None when there is no active key `key_id`."""
    if not keys.revoke(session, key_id):
        return None
    session.commit()  # refused from here on, before its work is ended: nothing new follows
    return end_work(session, key_id)


def end_work(session: Session, key_id: str) -> Ended:
    """Cancel the key's running sweeps and its unfinished jobs (again safe: a job an API
    process admitted in the moment its key was still cached is caught by a second call)."""
    running = session.scalars(
        select(Sweep).where(Sweep.owner_id == key_id, Sweep.status == SweepStatus.running)
    ).all()
    for sweep in running:
        sweeps.cancel(session, sweep)  # its queued and running trials too
    unfinished = session.scalars(
        select(Job).where(
            Job.owner_id == key_id,
            Job.status.not_in([*TERMINAL, JobStatus.cancelling]),
        )
    ).all()
    for job in unfinished:
        crud.request_cancel(session, job)
    session.commit()
    for sweep_id in {job.sweep_id for job in unfinished if job.sweep_id}:
        sweeps.trial_ended(sweep_id)  # a finished sweep's trial cancelled: it may finish
    return Ended(sweeps=len(running), jobs=len(unfinished))
