"""What a lost worker leaves behind, on SQLite and on real PostgreSQL: a job it was cancelling
ends cancelled (never retried), and its successor of the same name starts idle."""

from __future__ import annotations

from app.core.db import session_scope
from app.domain import crud
from app.domain.states import JobStatus
from app.domain.tables import Worker
from app.services.maintenance import reap_lost_workers
from tests.app.domain.test_crud import claim, expire_lease, new_job, status_of
from worker.supervisor.heartbeat import register, set_current_job


def test_a_job_whose_worker_is_lost_while_cancelling_ends_cancelled(
    db_env: dict[str, str],
) -> None:
    job_id = new_job()  # max_restarts=1: a lost running job would be re-queued
    claim(job_id)
    with session_scope() as session:
        crud.request_cancel(session, crud.get_job(session, job_id))  # type: ignore[arg-type]
    expire_lease(job_id)
    with session_scope() as session:
        assert reap_lost_workers(session) == 1
    job = status_of(job_id)
    assert (job.status, job.attempt) == (JobStatus.cancelled, 1)
    with session_scope() as session:
        reasons = [t.reason for t in crud.transitions(session, job_id)]
    assert reasons[-1] == "worker lost while cancelling"
    assert claim(job_id) is None  # nothing left to run


def test_a_restarted_worker_registers_idle_over_its_dead_predecessors_busy_row(
    db_env: dict[str, str],
) -> None:
    register("gpus-0-1@box", [])
    set_current_job("gpus-0-1@box", "job-the-dead-worker-was-running")
    register("gpus-0-1@box", [])  # the same name, after a crash
    with session_scope() as session:
        row = session.get(Worker, "gpus-0-1@box")
        assert row is not None and row.current_job_id is None
