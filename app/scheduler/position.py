"""Where a queued job stands: its position (1 = next), why it waits, and when it may start.

Its competitors are the queued jobs the workers that fit it could run instead. Jobs of higher
priority go first; at its priority keys take turns in fair-share order (policy.fair_order),
each key's jobs oldest first. The estimated start plays the queue forward on those workers:
each running job frees its worker after its remaining epochs at its own recent pace and its
wind-down, and each job ahead holds a worker as long as this one is expected to (start-up,
epochs at its framework's mean epoch time, wind-down: app.scheduler.durations); null when
nothing measured says how long an epoch takes.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.domain import worker_reads
from app.domain.cost import gigabytes
from app.domain.tables import Job, Worker, utcnow
from app.scheduler import gang
from app.scheduler.claim import fits, heads, shares
from app.scheduler.durations import expected_seconds, remaining
from app.scheduler.policy import Share, fair_order

ETA_HORIZON = 1000  # jobs ahead played forward at most; further back the estimate is null


@dataclass(frozen=True)
class Standing:
    """A queued job's place in the queue (GET /v1/jobs/{id}'s `queue`)."""

    position: int
    reason: str
    estimated_start: datetime | None


@dataclass(frozen=True)
class Ahead:
    """How many competitors go before the job: of higher priority, of its key, of others."""

    higher: int
    own: int
    others: int
    others_by_share: bool  # other keys go first because this key used more than its share

    @property
    def total(self) -> int:
        return self.higher + self.own + self.others


def standing(session: Session, job: Job, settings: Settings) -> Standing:
    """Position, reason and estimated start of a queued job."""
    now = utcnow()
    workers = worker_reads.live_workers(session, 3 * settings.heartbeat_seconds)
    fitting = fitting_workers(workers, job)
    reach = min((w.gpus for w in fitting), default=job.gpus)  # the smallest worker that fits
    ahead = jobs_ahead(session, job, reach, settings, now)
    seated = len(gang.seats_of(session, job.id)) if job.nodes > 1 else 0
    why = (
        f"forming its gang: {seated} of {job.nodes} workers joined"
        if seated
        else reason(job, ahead, workers, fitting)
    )
    return Standing(ahead.total + 1, why, eta(session, job, ahead, fitting, now))


def fitting_workers(workers: Sequence[Worker], job: Job) -> list[Worker]:
    """The live workers whose claim can take the job (app.scheduler.claim); the stored
    standings (app.scheduler.standings) use the same rule."""
    return [w for w in workers if takes(w, job)]


def jobs_ahead(session: Session, job: Job, reach: int, settings: Settings, now: datetime) -> Ahead:
    """Competitors that run before the job, in the order the claim would take them."""
    where = fits(reach)
    higher = session.scalar(
        select(func.count()).select_from(Job).where(*where, Job.priority > job.priority)
    )
    level = [*where, Job.priority == job.priority]
    found = heads(session, level)
    counts = dict(
        session.execute(
            select(Job.owner_id, func.count()).where(*level).group_by(Job.owner_id)
        ).all()
    )
    mine = Job.owner_id.is_(None) if job.owner_id is None else Job.owner_id == job.owner_id
    earlier = or_(
        Job.created_at < job.created_at, and_(Job.created_at == job.created_at, Job.id < job.id)
    )
    own = int(
        session.scalar(select(func.count()).select_from(Job).where(*level, mine, earlier)) or 0
    )
    turn = fair_order(shares(session, found, settings, now), settings.fair_share_tolerance)
    return placed(job, turn, counts, int(higher or 0), own, settings.fair_share_tolerance)


def placed(
    job: Job,
    turn: Sequence[Share],
    counts: Mapping[str | None, int],
    higher: int,
    own: int,
    tolerance: float,
) -> Ahead:
    """The jobs ahead, given its level's keys in turn order, each key's jobs at its level, the
    competitors of higher priority and its own key's earlier jobs."""
    owners = [share.owner for share in turn]
    rank = owners.index(job.owner_id) if job.owner_id in owners else len(owners)
    others = sum(
        min(int(counts.get(owner, 0)), own + (1 if i < rank else 0))
        for i, owner in enumerate(owners)
        if owner != job.owner_id
    )
    # Over its share: a key that used less goes first, by more than the level band.
    by_share = 0 < rank < len(turn) and turn[0].load * (1 + tolerance) < turn[rank].load
    return Ahead(higher, own, others, by_share)


def reason(job: Job, ahead: Ahead, workers: Sequence[Worker], fitting: Sequence[Worker]) -> str:
    """Why the job waits, in words."""
    if not workers:
        return "waiting for a worker: none is live"
    if not fitting:
        largest = max(w.gpus for w in workers)
        if largest >= job.gpus:  # GPUs enough, memory not (app.scheduler.claim)
            most = gigabytes(max(w.memory_bytes or 0 for w in workers))
            needed = gigabytes(job.memory_bytes or 0)
            return f"needs {needed} of memory on one worker; the largest live worker has {most}"
        return f"needs {job.gpus} GPUs on one worker; the largest live worker has {largest}"
    free = sum(1 for w in fitting if w.current_job_id is None)
    if job.nodes > 1 and free < job.nodes:
        return f"needs {job.nodes} workers{_with_gpus(job)}; {free} free"
    if ahead.higher:
        return f"behind {ahead.higher} jobs of higher priority"
    if ahead.others_by_share:
        return f"key over its share: {ahead.others} jobs of keys that used less go first"
    if ahead.total:
        return f"behind {ahead.total} jobs of equal priority (keys take turns, oldest first)"
    if all(w.current_job_id for w in fitting):
        return "next to run: every worker that fits is busy"
    return "next to run: a free worker is picking it up"


def takes(worker: Worker, job: Job) -> bool:
    """Whether the worker's claim can take the job: its GPUs, and its memory where both are
    known (app.scheduler.claim)."""
    memory, needed = worker.memory_bytes, job.memory_bytes
    return worker.gpus >= job.gpus and (memory is None or needed is None or memory >= needed)


def _with_gpus(job: Job) -> str:
    return f" with {job.gpus} GPUs each" if job.gpus else ""


def eta(
    session: Session, job: Job, ahead: Ahead, fitting: Sequence[Worker], now: datetime
) -> datetime | None:
    """When a worker may take the job, playing the queue forward (None: unknown)."""
    if not fitting or ahead.total > ETA_HORIZON:
        return None
    per_job = expected_seconds(session, job)
    frees = [
        remaining(session, w.current_job_id, now) if w.current_job_id else 0.0 for w in fitting
    ]
    return played(ahead, per_job, frees, now)


def played(
    ahead: Ahead, per_job: float | None, frees: Sequence[float | None], now: datetime
) -> datetime | None:
    """The estimated start, given how long the job holds a worker and when each worker that
    fits it is free (None: unknown)."""
    if not frees or ahead.total > ETA_HORIZON:
        return None
    if any(f is None for f in frees) or (ahead.total and per_job is None):
        return None
    heap = [float(f) for f in frees if f is not None]
    heapq.heapify(heap)
    for _ in range(ahead.total):
        heapq.heappush(heap, heapq.heappop(heap) + (per_job or 0.0))
    return now + timedelta(seconds=heap[0])
