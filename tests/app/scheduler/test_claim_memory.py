"""Admission measures a job's memory estimate against the largest live worker's memory, so the
claim measures it against the claiming worker's own: a smaller worker leaves the job queued
for one with enough, and the job's wait_reason and queue standing say so. The estimate is
stored with the job."""

from __future__ import annotations

from sqlalchemy import update

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud, worker_reads
from app.domain.cost import builtin_data, estimate, host_memory_bytes
from app.domain.states import JobStatus
from app.domain.tables import Job, Worker
from app.scheduler.claim import claim_next
from app.scheduler.position import standing
from app.schemas.job_spec import JobSpec
from worker.supervisor import wakeup
from worker.supervisor.claimed import Claimed

GIB = 2**30
SPEC = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "digits"}})


def new_job(memory: int | None = None) -> str:
    """A queued job; `memory` overrides its stored estimate."""
    with session_scope() as session:
        job = crud.create_job(session, SPEC, "gpus-0")
        if memory is not None:
            session.execute(update(Job).where(Job.id == job.id).values(memory_bytes=memory))
        return job.id


def add_worker(name: str, memory: int, busy: str | None = None) -> None:
    with session_scope() as session:
        session.add(
            Worker(
                name=name,
                hostname="h",
                pid=1,
                gpus=0,
                devices=[],
                queues=["gpus-0"],
                memory_bytes=memory,
                current_job_id=busy,
            )
        )


def status_of(job_id: str) -> str:
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        return job.status


def reason_of(job_id: str) -> str | None:
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        return worker_reads.wait_reason(session, job, 60)


def standing_of(job_id: str) -> str:
    """The queue view's reason (GET /v1/queue, a job's `queue`)."""
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        return standing(session, job, get_settings()).reason


def test_the_admitted_estimate_is_stored_with_the_job(db_env: dict[str, str]) -> None:
    data = builtin_data(SPEC)
    assert data is not None
    with session_scope() as session:
        job = crud.create_job(session, SPEC, "gpus-0")
        assert job.memory_bytes == estimate(SPEC, data).memory_bytes > 0


def test_a_worker_without_the_jobs_memory_leaves_it_to_one_with_enough(
    db_env: dict[str, str],
) -> None:
    big = new_job(16 * GIB)
    add_worker("small", 8 * GIB)
    add_worker("large", 32 * GIB, busy="another job")
    with session_scope() as session:
        assert claim_next(session, "small", 0, get_settings(), memory=8 * GIB) is None
    assert status_of(big) == JobStatus.queued
    assert reason_of(big) == "waiting for a free worker: every worker that fits is busy"
    assert standing_of(big) == "next to run: every worker that fits is busy"
    with session_scope() as session:
        job = claim_next(session, "large", 0, get_settings(), memory=32 * GIB)
        assert job is not None and job.id == big


def test_a_small_worker_takes_the_job_that_fits_it_past_one_that_does_not(
    db_env: dict[str, str],
) -> None:
    new_job(16 * GIB)  # older, same priority: first in line, but not for this worker
    small = new_job(GIB)
    with session_scope() as session:
        job = claim_next(session, "small", 0, get_settings(), memory=8 * GIB)
        assert job is not None and job.id == small


def test_the_wait_reason_names_the_memory_no_live_worker_has(db_env: dict[str, str]) -> None:
    big = new_job(16 * GIB)
    add_worker("small", 8 * GIB)
    assert reason_of(big) == (
        "waiting for a worker with ≥ 17.2 GB of memory (the job's estimate); "
        "the largest live worker that fits has 8.6 GB"
    )
    assert (
        standing_of(big)
        == "needs 17.2 GB of memory on one worker; the largest live worker has 8.6 GB"
    )


def test_the_workers_claim_measures_the_job_against_its_own_memory(
    db_env: dict[str, str],
) -> None:
    """The supervisor's own claim: this machine's memory is the worker's."""
    own = host_memory_bytes()
    assert own is not None
    too_big = new_job(own + 1)
    assert wakeup.claim(get_settings(), "w1") is None
    assert status_of(too_big) == JobStatus.queued
    fits = new_job(own)
    claimed = wakeup.claim(get_settings(), "w1")
    assert isinstance(claimed, Claimed)  # a single node's attempt, not a gang's seat
    assert claimed.job_id == fits and claimed.memory_bytes == own  # the limit's basis
