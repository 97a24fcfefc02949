"""Gang admission: a multi-node job starts only when `nodes` free workers hold seats at once.

A worker woken for a job that needs N workers opens its gang (seat 0) only while N live
workers that fit it are free (`admissible`, counted in SQL), then sends N-1 more wake-ups; a
free worker that is woken takes a seat of a forming gang before anything else. The N-th seat's
transaction claims the job (queued -> running, a new attempt). Each seat has a lease its worker
renews; a forming gang whose seat lapses, or that has not filled within one lease, is
dissolved: its seats go, their workers are free again and the job gets a fresh wake-up. So
until a gang opens nothing is held, and a gang that cannot form lets go within a lease.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, delete, exists, func, or_, select, update
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.domain import crud, scheduler_stats
from app.domain.states import ACTIVE, ErrorCode, JobStatus, StopReason
from app.domain.tables import GangSeat, Job, Worker, utcnow
from app.scheduler import gang_reach

LIVE_BEATS = 3  # a worker is live while its last heartbeat is at most this many beats old
SEATED, DONE, LOST = "seated", "done", "lost"  # a seat's state


@dataclass(frozen=True)
class TakenSeat:
    """A worker's seat in a gang that is forming (or formed by its own taking it)."""

    job_id: str
    rank: int
    nodes: int


@dataclass(frozen=True)
class Rendezvous:
    """What a worker offers a gang: its address and a port it found free (rank 0's hosts
    PyTorch's rendezvous; every seat's is its TensorFlow worker's server), its machine
    and network namespace (gang_reach.machine_netns) and, for an address no other machine
    reaches, which kind (gang_reach.LOOPBACK, DOCKER_BRIDGE)."""

    address: str
    port: int
    machine_netns: str | None = None
    local_only: str | None = None


def free_workers(settings: Settings, now: datetime) -> ColumnElement[int]:
    """Live free workers that fit the job of the enclosing query (a correlated count)."""
    horizon = now - timedelta(seconds=LIVE_BEATS * settings.heartbeat_seconds)
    count = (
        select(func.count())
        .select_from(Worker)
        .where(
            Worker.heartbeat_at >= horizon,
            Worker.current_job_id.is_(None),
            Worker.gpus >= Job.gpus,
            or_(
                Job.memory_bytes.is_(None),
                Worker.memory_bytes.is_(None),
                Worker.memory_bytes >= Job.memory_bytes,
            ),
        )
        .correlate(Job)
    )
    return count.scalar_subquery()


def within_memory(memory: int | None) -> list[ColumnElement[bool]]:
    """Jobs whose admitted memory estimate fits a worker's `memory` (None: not known; and a
    job stored without an estimate fits any)."""
    if memory is None:
        return []
    return [or_(Job.memory_bytes.is_(None), Job.memory_bytes <= memory)]


def admissible(settings: Settings, now: datetime) -> list[ColumnElement[bool]]:
    """A queued job a worker may take now: one node, or a gang with enough free workers
    whose gang has not opened yet (a forming gang is joined, not picked)."""
    opened = exists().where(GangSeat.job_id == Job.id)
    gang_fits = and_(Job.nodes <= free_workers(settings, now), ~opened)
    return [or_(Job.nodes <= 1, gang_fits)]


def open_gang(
    session: Session, job_id: str, worker: str, where: Rendezvous | None, settings: Settings
) -> TakenSeat:
    """Seat 0 of the picked job's gang: this worker hosts the rendezvous."""
    nodes = int(session.scalar(select(Job.nodes).where(Job.id == job_id)) or 1)
    _take_seat(session, job_id, worker, 0, settings, where)
    return TakenSeat(job_id, 0, nodes)


def join_forming(
    session: Session,
    worker: str,
    gpus: int,
    settings: Settings,
    where: Rendezvous | None = None,
    memory: int | None = None,
) -> TakenSeat | None:
    """A seat in the oldest forming gang that fits this worker, at `where`; the last seat forms
    it, unless a seat's address cannot be reached by another (the job fails, saying which)."""
    mine = exists().where(GangSeat.job_id == Job.id, GangSeat.worker == worker)
    forming = (
        select(Job)
        .where(
            Job.status == JobStatus.queued,
            Job.nodes > 1,
            Job.gpus <= gpus,
            *within_memory(memory),
            exists().where(GangSeat.job_id == Job.id),
            ~mine,
        )
        .order_by(Job.priority.desc(), Job.created_at, Job.id)
        .limit(1)
        .with_for_update()  # joiners of one gang take turns: ranks stay 0..N-1
    )
    job = session.scalar(forming)
    if job is None:
        return None
    seats = seats_of(session, job.id)
    if len(seats) >= job.nodes or any(seat.attempt is not None for seat in seats):
        return None  # full, or the seats of an attempt that ended (dissolve clears them)
    _take_seat(session, job.id, worker, len(seats), settings, where)
    if len(seats) + 1 == job.nodes:
        everyone = seats_of(session, job.id)
        why = gang_reach.unreachable(everyone)
        if why is not None:
            message = f"the gang cannot form: {why}"
            code, stop = ErrorCode.invalid_config, StopReason.error
            crud.force_fail_queued(session, job, code, message, stop)
            release(session, job.id, [s.worker for s in everyone])
            return None
        _form(session, job.id, seats[0].worker, settings)
    return TakenSeat(job.id, len(seats), job.nodes)


def _take_seat(
    session: Session,
    job_id: str,
    worker: str,
    rank: int,
    settings: Settings,
    where: Rendezvous | None,
) -> None:
    """The seat's row, and the worker marked busy with the job (no other gang counts it)."""
    session.add(
        GangSeat(
            job_id=job_id,
            worker=worker,
            rank=rank,
            address=where.address if where else None,
            port=where.port if where else None,
            machine_netns=where.machine_netns if where else None,
            local_only=where.local_only if where else None,
            lease_expires_at=utcnow() + timedelta(seconds=settings.lease_seconds),
            state=SEATED,
        )
    )
    session.execute(update(Worker).where(Worker.name == worker).values(current_job_id=job_id))
    session.flush()


def _form(session: Session, job_id: str, worker: str, settings: Settings) -> None:
    """Every seat is held: the job runs, its lease held by rank 0's worker, and the attempt
    has a fresh secret that only its seats' workers read (the rendezvous asks every rank)."""
    job = crud.claim_job(session, job_id, worker, settings.lease_seconds)
    assert job is not None  # its row is locked by this transaction, and queued
    secret = secrets.token_hex(32)
    session.execute(
        update(GangSeat).where(GangSeat.job_id == job_id).values(attempt=job.attempt, secret=secret)
    )
    scheduler_stats.count_wait(session, job_id)


def seats_of(session: Session, job_id: str) -> Sequence[GangSeat]:
    """The gang's seats, rank 0 first."""
    query = select(GangSeat).where(GangSeat.job_id == job_id).order_by(GangSeat.rank)
    return session.scalars(query).all()


def renew_seat(session: Session, job_id: str, worker: str, settings: Settings) -> bool:
    """Extend this worker's seat; False once it is gone (the gang was dissolved or ended)."""
    renewed = session.execute(
        update(GangSeat)
        .where(GangSeat.job_id == job_id, GangSeat.worker == worker)
        .values(lease_expires_at=utcnow() + timedelta(seconds=settings.lease_seconds))
    )
    return bool(getattr(renewed, "rowcount", 0))


def end_seat(session: Session, job_id: str, worker: str, state: str) -> None:
    """This worker's training process ended (done) or died (lost): rank 0 reads which."""
    session.execute(
        update(GangSeat)
        .where(GangSeat.job_id == job_id, GangSeat.worker == worker)
        .values(state=state)
    )


def broken(session: Session, job_id: str, attempt: int, me: str) -> str | None:
    """Why the running gang cannot go on (a seat lost, lapsed or gone), or None."""
    seats = [s for s in seats_of(session, job_id) if s.attempt == attempt]
    nodes = session.scalar(select(Job.nodes).where(Job.id == job_id)) or 0
    if len(seats) < nodes:
        return f"{nodes - len(seats)} of the gang's {nodes} seats are gone"
    now = utcnow()
    for seat in seats:
        if seat.worker == me:
            continue
        if seat.state == LOST:
            return f"node {seat.rank} ({seat.worker}) lost its training process"
        if seat.state == SEATED and seat.lease_expires_at < now:
            return f"node {seat.rank} ({seat.worker}) stopped renewing its seat"
    return None


def release(session: Session, job_id: str, workers: Sequence[str]) -> None:
    """The gang's seats go; their workers are free again (if still marked with this job)."""
    session.execute(delete(GangSeat).where(GangSeat.job_id == job_id))
    session.execute(
        update(Worker)
        .where(Worker.name.in_(list(workers)), Worker.current_job_id == job_id)
        .values(current_job_id=None)
    )


def dissolve_stale(session: Session, settings: Settings) -> list[str]:
    """Release gangs that cannot form or have ended; the queued jobs among them, to wake."""
    by_job: dict[str, list[GangSeat]] = defaultdict(list)
    for seat in session.scalars(select(GangSeat)):
        by_job[seat.job_id].append(seat)
    woken = []
    for job_id, seats in by_job.items():
        job = session.get(Job, job_id)
        if job is None or _stale(job, seats, settings):
            release(session, job_id, [s.worker for s in seats])
            if job is not None and job.status == JobStatus.queued:
                woken.append(job_id)
    return woken


def _stale(job: Job, seats: Sequence[GangSeat], settings: Settings) -> bool:
    now = utcnow()
    if job.status not in (JobStatus.queued, *ACTIVE):
        return True  # ended: nothing to hold any more
    if job.status != JobStatus.queued:
        return any(seat.attempt not in (None, job.attempt) for seat in seats)
    window = timedelta(seconds=settings.lease_seconds)  # a gang forms within a lease, or not
    return (
        any(seat.attempt is not None for seat in seats)  # an earlier attempt's gang
        or any(seat.lease_expires_at < now for seat in seats)
        or min(seat.joined_at for seat in seats) + window < now
    )
