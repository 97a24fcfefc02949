"""The job state machine and metrics upsert, on SQLite and on real PostgreSQL."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from sqlalchemy import update

from app.core.db import session_scope
from app.domain import crud, epoch_rows, job_reads
from app.domain.states import JobStatus, RequeueCause, StopReason
from app.domain.tables import Job, utcnow
from app.schemas.job_spec import JobSpec
from app.services.maintenance import reap_lost_workers

SPEC = JobSpec.model_validate(
    {"framework": "pytorch", "dataset": {"name": "digits"}, "max_restarts": 1}
)


def new_job() -> str:
    with session_scope() as session:
        return crud.create_job(session, SPEC, "gpus-0").id


def claim(job_id: str, worker: str = "w1") -> Job | None:
    with session_scope() as session:
        return crud.claim_job(session, job_id, worker, lease_seconds=30)


def status_of(job_id: str) -> Job:
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        return job


def test_claim_is_won_once(db_env: dict[str, str]) -> None:
    job_id = new_job()
    first, second = claim(job_id, "w1"), claim(job_id, "w2")
    assert first is not None and first.attempt == 1 and first.worker_name == "w1"
    assert second is None  # a redelivered message finds the job taken
    assert status_of(job_id).status == JobStatus.running


def test_cancel_queued_never_runs_and_finished_is_conflict(db_env: dict[str, str]) -> None:
    job_id = new_job()
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        crud.request_cancel(session, job)
    assert status_of(job_id).status == JobStatus.cancelled
    assert claim(job_id) is None
    with session_scope() as session, pytest.raises(crud.Conflict):
        crud.request_cancel(session, crud.get_job(session, job_id))  # type: ignore[arg-type]


def test_cancel_running_goes_through_cancelling(db_env: dict[str, str]) -> None:
    job_id = new_job()
    claim(job_id)
    with session_scope() as session:
        crud.request_cancel(session, crud.get_job(session, job_id))  # type: ignore[arg-type]
    assert status_of(job_id).status == JobStatus.cancelling
    with session_scope() as session:
        assert crud.finish_job(
            session, job_id, 1, JobStatus.cancelled, stop_reason="cancelled", reason="stopped"
        )
        transitions = [(t.from_status, t.to_status) for t in crud.transitions(session, job_id)]
    assert transitions == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "cancelling"),
        ("cancelling", "cancelled"),
    ]


def test_finish_is_fenced_by_attempt(db_env: dict[str, str]) -> None:
    job_id = new_job()
    claim(job_id)
    with session_scope() as session:
        assert not crud.finish_job(
            session, job_id, 2, JobStatus.succeeded, stop_reason="completed", reason="x"
        )
        assert crud.finish_job(
            session, job_id, 1, JobStatus.succeeded, stop_reason="completed", reason="x"
        )
        assert not crud.finish_job(
            session, job_id, 1, JobStatus.failed, stop_reason="error", reason="late"
        )
    assert status_of(job_id).status == JobStatus.succeeded


def test_metrics_upsert_replaces_and_nulls_non_finite(db_env: dict[str, str]) -> None:
    job_id = new_job()
    claim(job_id)
    with session_scope() as session:
        assert epoch_rows.record_epoch(
            session, job_id, 1, 1, {"train_loss": 2.0, "val_loss": math.nan}
        )
        assert epoch_rows.record_epoch(session, job_id, 1, 2, {"train_loss": math.inf})
        assert epoch_rows.record_epoch(
            session, job_id, 1, 1, {"train_loss": 1.5, "val_loss": 1.0}, best=(1, 1.0)
        )
        assert not epoch_rows.record_epoch(
            session, job_id, 7, 3, {"train_loss": 1.0}
        )  # not our attempt
    with session_scope() as session:
        rows = epoch_rows.read_metrics(session, job_id)
        assert [(r.epoch, r.train_loss, r.val_loss) for r in rows] == [
            (1, 1.5, 1.0),
            (2, None, None),
        ]
        assert [r.epoch for r in epoch_rows.read_metrics(session, job_id, since_epoch=1)] == [2]
        assert epoch_rows.drop_metrics_after(session, job_id, 1, 1) == 1
    assert status_of(job_id).best_epoch == 1 and status_of(job_id).current_epoch == 1


def test_one_requeue_for_every_cause_each_with_its_reason_and_attempt(
    db_env: dict[str, str],
) -> None:
    """A preemption keeps the attempt (and needs a preemption request); any other cause makes
    the next claim a new attempt, and clears a preemption request it overtook."""
    job_id = new_job()
    reasons = []
    for cause, detail in [
        (RequeueCause.lost, None),
        (RequeueCause.failed, "worker_lost"),
        (RequeueCause.shutdown, "stopped at epoch 2"),
        (RequeueCause.preempted, "stopped after epoch 3"),
    ]:
        running = claim(job_id)
        assert running is not None
        with session_scope() as session:
            job = crud.get_job(session, job_id)
            assert job is not None
            assert not crud.requeue(session, job, RequeueCause.preempted)  # nobody asked
            session.execute(update(Job).where(Job.id == job_id).values(preempted_by="high"))
            job.preempted_by = "high"
            assert crud.requeue(session, job, cause, detail)
            assert not crud.requeue(session, job, cause, detail)  # queued now: not ours
            reasons.append(crud.transitions(session, job_id)[-1].reason)
        kept = "high" if cause == RequeueCause.preempted else None
        assert status_of(job_id).preempted_by == kept
    assert reasons == [
        "worker lost (lease expired), attempt 1",
        "attempt 2 failed (worker_lost); retrying",
        "worker shutting down; re-queued (stopped at epoch 2)",
        "preempted for job high: stopped after epoch 3; resumes from there",
    ]
    resumed = claim(job_id)
    assert resumed is not None and resumed.attempt == 4  # 1, 2, 3, then the same 4


def expire_lease(job_id: str) -> None:
    with session_scope() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def test_lost_worker_is_requeued_then_failed_after_max_restarts(db_env: dict[str, str]) -> None:
    job_id = new_job()  # max_restarts=1: two attempts in all
    claim(job_id)
    expire_lease(job_id)
    with session_scope() as session:
        assert reap_lost_workers(session) == 1
    assert status_of(job_id).status == JobStatus.queued
    assert claim(job_id).attempt == 2  # type: ignore[union-attr]
    expire_lease(job_id)
    with session_scope() as session:
        assert reap_lost_workers(session) == 1
    job = status_of(job_id)
    assert (job.status, job.stop_reason, job.attempt) == (JobStatus.failed, "worker_lost", 2)


def test_a_lost_attempt_cannot_delete_or_rewrite_its_successors_rows(
    db_env: dict[str, str],
) -> None:
    """Attempt 1 lost its lease (a hung database) and attempt 2 resumed from epoch 2; attempt
    1's writes that arrive late change nothing. Before the fence on drop_metrics_after, a late
    "forget epochs after 1" deleted rows 2-4, attempt 2's among them."""
    job_id = new_job()
    claim(job_id)
    with session_scope() as session:
        for epoch in (1, 2, 3):
            assert epoch_rows.record_epoch(session, job_id, 1, epoch, {"train_loss": 1.0})
    expire_lease(job_id)
    with session_scope() as session:
        assert reap_lost_workers(session) == 1
    assert claim(job_id, "w2").attempt == 2  # type: ignore[union-attr]
    with session_scope() as session:
        assert epoch_rows.drop_metrics_after(session, job_id, 2, 2) == 1  # its checkpoint: 2
        for epoch in (3, 4):
            assert epoch_rows.record_epoch(session, job_id, 2, epoch, {"train_loss": 0.5})
    with session_scope() as session:  # the lost attempt, late
        assert epoch_rows.drop_metrics_after(session, job_id, 1, 1) is None
        assert not epoch_rows.record_epoch(session, job_id, 1, 3, {"train_loss": 9.0})
        assert not epoch_rows.record_epoch(session, job_id, 1, 5, {"train_loss": 9.0})
        assert crud.renew_lease(session, job_id, 1, 30) is None
        ended = crud.finish_job(
            session, job_id, 1, JobStatus.failed, stop_reason=None, reason="late"
        )
        assert not ended
    with session_scope() as session:
        rows = epoch_rows.read_metrics(session, job_id)
        assert [(r.epoch, r.attempt, r.train_loss) for r in rows] == [
            (1, 1, 1.0),
            (2, 1, 1.0),
            (3, 2, 0.5),
            (4, 2, 0.5),
        ]
    job = status_of(job_id)
    assert (job.status, job.attempt, job.current_epoch) == (JobStatus.running, 2, 4)


def test_list_is_newest_first_with_cursor_and_filters(db_env: dict[str, str]) -> None:
    ids = [new_job() for _ in range(5)]
    claim(ids[0])
    with session_scope() as session:
        page1, cursor = job_reads.list_jobs(session, limit=2)
        page2, cursor2 = job_reads.list_jobs(session, limit=2, cursor=cursor)
        page3, cursor3 = job_reads.list_jobs(session, limit=2, cursor=cursor2)
        running, _ = job_reads.list_jobs(session, limit=10, status="running")
        with pytest.raises(ValueError):
            job_reads.list_jobs(session, limit=2, cursor="not-a-cursor")
    assert [j.id for j in page1 + page2 + page3] == ids[::-1] and cursor3 is None
    assert [j.id for j in running] == [ids[0]]


def test_the_latest_checkpoint_moves_only_for_the_attempt_that_owns_the_job(
    db_env: dict[str, str],
) -> None:
    job_id = new_job()
    assert status_of(job_id).latest_checkpoint is None
    claim(job_id)
    name = "epoch-000002-step-000000036"
    with session_scope() as session:
        assert epoch_rows.record_checkpoint(session, job_id, 1, name)
        assert not epoch_rows.record_checkpoint(session, job_id, 2, "epoch-000009-step-9")
    assert status_of(job_id).latest_checkpoint == name
    with session_scope() as session:
        done = StopReason.completed
        assert crud.finish_job(session, job_id, 1, JobStatus.succeeded, stop_reason=done, reason="")
        assert not epoch_rows.record_checkpoint(session, job_id, 1, "epoch-000003-step-54")
    assert status_of(job_id).latest_checkpoint == name  # an ended job's writer is gone
