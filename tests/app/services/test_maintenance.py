"""The reconciler on a real database and broker: re-sending lost messages (when, how often),
recovering from a failed publish, and queue timeouts."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import update

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.log_setup import JobFields
from app.domain import crud
from app.domain.states import JobStatus
from app.domain.tables import Job, Worker, utcnow
from app.schemas.job_spec import JobSpec
from app.services.maintenance import expire_and_republish
from app.services.publish import PublishResult, publish_queued
from tests.helpers import clear_caches, free_port


def new_job(**spec: object) -> Job:
    body = {"framework": "pytorch", "dataset": {"name": "digits"}, **spec}
    with session_scope() as session:
        return crud.create_job(session, JobSpec.model_validate(body), "gpus-0")


def stored(job_id: str) -> Job:
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        return job


def set_job(job_id: str, **values: object) -> None:
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(**values))


def add_worker(name: str, gpus: int = 0, busy: str | None = None, age: float = 0) -> None:
    with session_scope() as session:
        session.add(
            Worker(
                name=name,
                hostname="h",
                pid=1,
                gpus=gpus,
                devices=[],
                queues=[],
                current_job_id=busy,
                heartbeat_at=utcnow() - timedelta(seconds=age),
            )
        )


def messages(env: dict[str, str], queue: str) -> int:
    """Messages waiting in the real broker's queue."""
    if "EPOCHAL_BROKER_URL" in env:
        return int(redis.Redis.from_url(env["EPOCHAL_BROKER_URL"]).llen(queue))
    folder = Path(env["EPOCHAL_HOME"]) / "broker" / "queue"
    return sum(1 for p in folder.glob(f"*.{queue}.msg"))


def reconcile() -> None:
    with session_scope() as session:
        expire_and_republish(session, get_settings())


@contextmanager
def logged_lines() -> Iterator[list[tuple[str, str]]]:
    """(the job id a line carries, its message) for each line logged meanwhile, as the
    service's handlers see them (app.core.log_setup.JobFields)."""
    lines: list[tuple[str, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append((record.job_id, record.getMessage()))  # type: ignore[attr-defined]

    handler, root = Keep(logging.INFO), logging.getLogger()
    handler.addFilter(JobFields("test"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def test_failed_publish_leaves_the_job_queued_and_the_next_round_sends_it(
    db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job, before = new_job(), messages(db_env, "gpus-0")
    monkeypatch.setenv("EPOCHAL_BROKER_URL", f"redis://127.0.0.1:{free_port()}/0")  # nobody
    clear_caches()
    with logged_lines() as lines:
        with session_scope() as session:
            stored_job = crud.get_job(session, job.id)
            assert stored_job is not None
            assert publish_queued(session, stored_job) is PublishResult.broker_down
        assert stored(job.id).status == JobStatus.queued and stored(job.id).dispatched_at is None
        if "EPOCHAL_BROKER_URL" in db_env:  # the broker is back
            monkeypatch.setenv("EPOCHAL_BROKER_URL", db_env["EPOCHAL_BROKER_URL"])
        else:
            monkeypatch.delenv("EPOCHAL_BROKER_URL")
        clear_caches()
        reconcile()  # no worker needed: a job never sent is sent at once
    assert stored(job.id).dispatched_at is not None and messages(db_env, "gpus-0") == before + 1
    # Both lines about the job carry its id, though neither is logged inside a job's request.
    about = [(job_id, text) for job_id, text in lines if job.id in text]
    assert any("could not publish" in text for _, text in about)
    assert any("re-sent job" in text for _, text in about)
    assert {job_id for job_id, _ in about} == {job.id}


def test_only_one_process_sends_a_job_per_round(db_env: dict[str, str]) -> None:
    job = new_job()
    before = messages(db_env, "gpus-0")
    mine, theirs = stored(job.id), stored(job.id)  # two processes read the same row
    with session_scope() as session:
        assert publish_queued(session, mine) is PublishResult.published
    with session_scope() as session:
        assert publish_queued(session, theirs) is PublishResult.taken
    assert messages(db_env, "gpus-0") == before + 1


@pytest.mark.parametrize(
    ("worker", "resent"),
    [
        (None, False),  # nobody to take it: its message may well be waiting
        ({"busy": "other-job"}, False),  # the fitting worker is busy: the message may wait
        ({"age": 3600}, False),  # an idle worker that stopped heartbeating is not live
        ({"gpus": 0}, True),  # idle, live, fitting: the message is gone, send again
    ],
)
def test_resend_only_when_a_fitting_worker_idles(
    db_env: dict[str, str], worker: dict[str, object] | None, resent: bool
) -> None:
    job, before = new_job(), messages(db_env, "gpus-0")
    with session_scope() as session:
        assert publish_queued(session, crud.get_job(session, job.id)) is PublishResult.published  # type: ignore[arg-type]
    long_ago = utcnow() - timedelta(hours=1)
    set_job(job.id, dispatched_at=long_ago)  # its message went out an hour ago
    if worker is not None:
        add_worker("w", **worker)  # type: ignore[arg-type]
    reconcile()
    reconcile()  # a second round at once re-sends nothing more (one per retry interval)
    assert (stored(job.id).dispatched_at != long_ago) is resent
    assert messages(db_env, "gpus-0") == before + (2 if resent else 1)


def test_an_idle_worker_without_gpus_does_not_trigger_a_resend_for_a_gpu_job(
    db_env: dict[str, str],
) -> None:
    job = new_job(resources={"gpus": 1})
    set_job(job.id, dispatched_at=utcnow() - timedelta(hours=1))
    add_worker("cpu-only", gpus=0)
    reconcile()
    assert utcnow() - stored(job.id).dispatched_at > timedelta(minutes=59)  # type: ignore[operator]


def test_queue_timeout_applies_only_before_the_first_start(db_env: dict[str, str]) -> None:
    waiting, retried = new_job(max_queue_seconds=1), new_job(max_queue_seconds=1)
    two_seconds_ago = utcnow() - timedelta(seconds=2)
    set_job(waiting.id, created_at=two_seconds_ago)
    # The other ran once and was re-queued after its worker was lost: it is not failed for
    # its age (max_restarts bounds it instead).
    set_job(retried.id, created_at=two_seconds_ago, attempt=1)
    reconcile()
    failed = stored(waiting.id)
    assert (failed.status, failed.stop_reason, failed.error_code) == (
        "failed",
        "queue_timeout",
        "queue_timeout",
    )
    assert "max_queue_seconds=1" in (failed.error or "")
    assert stored(retried.id).status == JobStatus.queued
