"""Races between real concurrent sessions: quotas and state changes hold.

Each change of a job's state is one conditional UPDATE, so two processes deciding at once
cannot both win; the per-key limit locks the key's row around its count and insert.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text, update

from app.core.config import get_settings
from app.core.db import session_factory, session_scope
from app.domain import crud
from app.domain.states import TERMINAL, JobStatus, StopReason
from app.domain.tables import Job, utcnow
from app.schemas.job_spec import JobSpec
from app.services.maintenance import reap_lost_workers
from tests.conftest import make_key

SPEC = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "digits"}})
LIMIT, SUBMITS = 5, 100


@pytest.fixture
def client(db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY", str(LIMIT))
    get_settings.cache_clear()
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('racer')}"
        yield test_client


def test_the_per_key_limit_holds_under_concurrent_submits(client: TestClient) -> None:
    """On PostgreSQL the key's row lock decides; on SQLite BEGIN IMMEDIATE already does."""
    body = {"framework": "pytorch", "dataset": {"name": "digits"}}
    assert client.post("/v1/jobs", json=body).status_code == 201  # one already queued
    with ThreadPoolExecutor(SUBMITS) as pool:
        codes = Counter(
            pool.map(lambda _: client.post("/v1/jobs", json=body).status_code, range(SUBMITS))
        )
    assert codes == {201: LIMIT - 1, 429: SUBMITS - LIMIT + 1}, codes
    with session_scope() as session:
        active = session.scalar(select(func.count()).where(Job.status == JobStatus.queued))
    assert active == LIMIT


UPLOADS = 20


def test_the_storage_quota_holds_under_concurrent_uploads(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Room for two uploads, twenty at once: the check before parsing lets them all through
    side by side, the one at commit (the key's row locked) admits exactly two."""
    from app.domain.datasets import stored_bytes
    from tests.app.api.test_datasets import images, npz, stored_files

    content = npz(**images(n=400))
    probe = client.post("/v1/datasets", files={"file": ("d.npz", content)})
    assert probe.status_code == 201, probe.text
    size = probe.json()["size_bytes"]
    assert client.delete(f"/v1/datasets/{probe.json()['id']}").status_code == 204
    monkeypatch.setenv("EPOCHAL_MAX_STORAGE_BYTES_PER_KEY", str(size * 5 // 2))
    monkeypatch.setenv("EPOCHAL_MAX_UPLOADS_PER_KEY", str(UPLOADS))  # all of them side by side
    get_settings.cache_clear()

    def post(_: int) -> int:
        return client.post("/v1/datasets", files={"file": ("d.npz", content)}).status_code

    with ThreadPoolExecutor(UPLOADS) as pool:
        codes = Counter(pool.map(post, range(UPLOADS)))
    assert codes == {201: 2, 507: UPLOADS - 2}, codes
    with session_scope() as session:
        owner = session.scalar(text("SELECT owner_id FROM dataset LIMIT 1"))
        assert stored_bytes(session, owner) == 2 * size
    assert len(stored_files()) == 2  # a refused upload leaves no file


def running_job_with_expired_lease() -> str:
    """A job on its last allowed attempt whose lease has run out: the reaper will fail it."""
    with session_scope() as session:
        job = crud.create_job(session, SPEC.model_copy(update={"max_restarts": 0}), "gpus-0")
        session.flush()
        assert crud.claim_job(session, job.id, "w1", lease_seconds=30) is not None
        session.execute(update(Job).where(Job.id == job.id).values(lease_expires_at=utcnow()))
        return job.id


def wait_until_a_session_waits_for_a_lock(finished: threading.Event) -> None:
    """Until PostgreSQL shows a backend blocked on a lock (the reaper behind our row lock)."""
    while not finished.is_set():
        with session_scope() as session:
            waiting = session.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                )
            )
        if waiting:
            return
        finished.wait(0.05)
    raise AssertionError("the reaper finished without waiting for the supervisor's row lock")


def test_reaper_racing_the_supervisor_ends_the_attempt_once(pg_env: dict[str, str]) -> None:
    job_id = running_job_with_expired_lease()
    supervisor = session_factory()()
    assert crud.finish_job(
        supervisor,
        job_id,
        1,
        JobStatus.succeeded,
        stop_reason=StopReason.completed,
        reason="completed",
    )  # not committed yet: the reaper reads the job as running, and its UPDATE must wait
    finished, reaped = threading.Event(), []

    def reap() -> None:
        with session_scope() as session:
            reaped.append(reap_lost_workers(session))
        finished.set()

    reaper = threading.Thread(target=reap)
    reaper.start()
    try:
        wait_until_a_session_waits_for_a_lock(finished)
        supervisor.commit()
    finally:
        supervisor.close()
        reaper.join()
    assert reaped == [0]
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None and job.status == JobStatus.succeeded
        ends = [t for t in crud.transitions(session, job_id) if t.to_status in TERMINAL]
    assert [t.to_status for t in ends] == [JobStatus.succeeded]
