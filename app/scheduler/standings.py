"""Every queued job's standing (app.scheduler.position), worked out for the whole queue at
once and stored in queue_standing, so that reading a queued job, GET /v1/queue and `epochal
queue` look it up instead of working it out per request.

A refresh reads the queued jobs and the live workers once, the fair-share turn once per
priority level and the durations once per framework and running job: a few statements per
level, not per job. It runs after each change to the queue the API makes (a submit, a cancel),
after a worker's claim, and in every maintenance round of every process
(EPOCHAL_MAINTENANCE_SECONDS), which catches what happens elsewhere (a job ending, a worker
joining or lost): a stored standing is at most one maintenance round old. A job submitted
another way (a sweep's trial) has no standing until the next refresh; its reads say so
(app.domain.job_reads.UNKNOWN).
"""

from __future__ import annotations

import bisect
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import session_scope
from app.domain import worker_reads
from app.domain.states import JobStatus
from app.domain.tables import Job, StoredStanding, Worker, utcnow
from app.scheduler import gang
from app.scheduler.claim import fits, heads, shares
from app.scheduler.durations import Overheads, held, mean_epoch, overheads, remaining
from app.scheduler.policy import Share, fair_order
from app.scheduler.position import Ahead, fitting_workers, placed, played, reason

log = logging.getLogger(__name__)

# Two refreshes at once would lock the same rows in different orders: PostgreSQL's
# transaction-scoped advisory lock on this key lets one run at a time (SQLite has one writer).
LOCK_KEY = 0x51A4D1


@dataclass(frozen=True)
class Found:
    """A queued job's standing as stored: its wait_reason beside position, reason and start."""

    wait_reason: str
    position: int
    reason: str
    estimated_start: datetime | None


class Durations:
    """How long jobs hold workers (app.scheduler.durations), each read once per refresh."""

    def __init__(self, session: Session, now: datetime) -> None:
        self.session, self.now = session, now
        self._means: dict[str, float | None] = {}
        self._overheads: dict[str, Overheads] = {}
        self._left: dict[str, float | None] = {}

    def per_job(self, job: Job) -> float | None:
        if job.framework not in self._means:
            self._means[job.framework] = mean_epoch(self.session, job.framework)
        per_epoch = self._means[job.framework]
        if per_epoch is None:
            return None
        if job.framework not in self._overheads:
            self._overheads[job.framework] = overheads(self.session, job.framework)
        return held(job, per_epoch, self._overheads[job.framework])

    def frees(self, worker: Worker) -> float | None:
        running = worker.current_job_id
        if running is None:
            return 0.0
        if running not in self._left:
            self._left[running] = remaining(self.session, running, self.now)
        return self._left[running]


class Level:
    """The competitors of one reach (the GPUs of the smallest worker that fits) and priority."""

    def __init__(self, turn: Sequence[Share]) -> None:
        self.turn = turn
        self.counts: Counter[str | None] = Counter()
        self.by_owner: dict[str | None, list[tuple[datetime, str]]] = defaultdict(list)

    def add(self, job: Job) -> None:
        self.counts[job.owner_id] += 1
        self.by_owner[job.owner_id].append((job.created_at, job.id))

    def own(self, job: Job) -> int:
        """Its key's jobs at this level that are older (the claim takes a key's oldest first)."""
        return bisect.bisect_left(self.by_owner[job.owner_id], (job.created_at, job.id))


def compute(session: Session, settings: Settings, now: datetime) -> dict[str, Found]:
    """Every queued job's standing, as position.standing works it out for one job."""
    jobs = session.scalars(select(Job).where(Job.status == JobStatus.queued)).all()
    workers = worker_reads.live_workers(session, 3 * settings.heartbeat_seconds)
    durations, levels = Durations(session, now), _levels(session, jobs, workers, settings, now)
    found = {}
    for job in jobs:
        fitting = fitting_workers(workers, job)
        level, priorities = levels[(_reach(job, fitting), job.priority)]
        higher = len(priorities) - bisect.bisect_right(priorities, job.priority)
        tolerance = settings.fair_share_tolerance
        ahead = placed(job, level.turn, level.counts, higher, level.own(job), tolerance)
        seated = len(gang.seats_of(session, job.id)) if job.nodes > 1 else 0
        why = (
            f"forming its gang: {seated} of {job.nodes} workers joined"
            if seated
            else reason(job, ahead, workers, fitting)
        )
        start = _start(job, ahead, fitting, durations, now)
        wait = worker_reads.wait_reason_among(job, workers)
        found[job.id] = Found(wait, ahead.total + 1, why, start)
    return found


def _reach(job: Job, fitting: Sequence[Worker]) -> int:
    return min((w.gpus for w in fitting), default=job.gpus)  # the smallest worker that fits


def _start(
    job: Job, ahead: Ahead, fitting: Sequence[Worker], durations: Durations, now: datetime
) -> datetime | None:
    if not fitting:
        return None
    frees = [durations.frees(w) for w in fitting]
    return played(ahead, durations.per_job(job) if ahead.total else None, frees, now)


def _levels(
    session: Session,
    jobs: Sequence[Job],
    workers: Sequence[Worker],
    settings: Settings,
    now: datetime,
) -> dict[tuple[int, int], tuple[Level, list[int]]]:
    """Each (reach, priority) that a queued job competes at, with the priorities (sorted) of
    every competitor of that reach."""
    reaches = {_reach(job, fitting_workers(workers, job)) for job in jobs}
    levels: dict[tuple[int, int], tuple[Level, list[int]]] = {}
    for reach in reaches:
        rivals = [job for job in jobs if job.gpus <= reach]
        priorities = sorted(job.priority for job in rivals)
        for priority in {job.priority for job in rivals}:
            found = heads(session, [*fits(reach), Job.priority == priority])
            turn = fair_order(shares(session, found, settings, now), settings.fair_share_tolerance)
            levels[(reach, priority)] = (Level(turn), priorities)
        for job in rivals:
            levels[(reach, job.priority)][0].add(job)
    for level, _ in levels.values():
        for mine in level.by_owner.values():
            mine.sort()
    return levels


def store(session: Session, found: dict[str, Found], now: datetime) -> None:
    """Write the standings (ids in order: two refreshes at once lock rows in the same order)
    and drop those of jobs no longer queued."""
    queued = select(Job.id).where(Job.status == JobStatus.queued)
    session.execute(delete(StoredStanding).where(StoredStanding.job_id.not_in(queued)))
    rows = [
        {"job_id": job_id, **vars(found[job_id]), "computed_at": now} for job_id in sorted(found)
    ]
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(StoredStanding)
    columns = ("position", "reason", "wait_reason", "estimated_start", "computed_at")
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["job_id"], set_={name: statement.excluded[name] for name in columns}
        ),
        rows,
    )


def refresh(settings: Settings, unless_within: float | None = None) -> None:
    """Work out and store every queued job's standing; with `unless_within`, not when another
    process did less than that many seconds ago (each process's maintenance round calls it:
    one of them does the work). A failure is logged, not raised (the next round tries again)."""
    try:
        with session_scope() as session:
            if session.get_bind().dialect.name == "postgresql":  # one refresh at a time
                session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
            now = utcnow()
            if unless_within is not None:
                newest = session.scalar(select(func.max(StoredStanding.computed_at)))
                if newest is not None and (now - newest).total_seconds() < unless_within:
                    return
            store(session, compute(session, settings, now), now)
    except Exception:
        log.warning("could not refresh the queue's standings", exc_info=True)
