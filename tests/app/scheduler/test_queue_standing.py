"""A queued job's standing is stored by the scheduler and looked up by the reads
(app.scheduler.standings): a read costs the same statements whatever the queue's length, a
change behind the API's back shows within a maintenance round, and the queue agrees."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from app.core.async_db import ReadPool
from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud, worker_reads
from app.domain.job_reads import UNKNOWN
from app.domain.states import JobStatus
from app.domain.tables import Job, Worker, utcnow
from app.scheduler import standings
from app.scheduler.position import standing
from app.schemas.job_spec import JobSpec
from app.services.queue import queue_for_gpus
from tests.conftest import make_key
from tests.helpers import wait_until

TINY = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 4}}


@contextmanager
def api(monkeypatch: pytest.MonkeyPatch, round_seconds: str) -> Iterator[TestClient]:
    """The API as an admin sees it, its maintenance round every `round_seconds`."""
    from app.main import create_app

    monkeypatch.setenv("EPOCHAL_MAINTENANCE_SECONDS", round_seconds)
    get_settings.cache_clear()
    key = make_key("reader", admin=True)
    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {key}"
        yield test_client


@pytest.fixture
def client(db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """No maintenance round runs meanwhile: what is stored is what the test refreshed."""
    with api(monkeypatch, "600") as test_client:
        yield test_client


@pytest.fixture
def rounds(db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """Maintenance rounds the test can wait for."""
    with api(monkeypatch, "0.5") as test_client:
        yield test_client


def queue_up(count: int, priority: int = 50) -> list[str]:
    """`count` queued jobs stored here, as a sweep or another process would (no refresh)."""
    spec = JobSpec.model_validate({**TINY, "priority": priority})
    with session_scope() as session:
        jobs = [crud.create_job(session, spec, queue_for_gpus(0)) for _ in range(count)]
        session.flush()
        return [job.id for job in jobs]


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL statements run meanwhile: through SQLAlchemy's engines, and through the
    asyncpg pool of the hot reads on PostgreSQL."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    run = ReadPool.run

    async def counted(self: ReadPool, batch: list[Any]) -> Any:
        seen.extend(sql for (sql, _), _ in batch)
        return await run(self, batch)

    event.listen(Engine, "before_cursor_execute", note)
    setattr(ReadPool, "run", counted)  # noqa: B010 (a spy: every call still runs)
    try:
        yield seen
    finally:
        setattr(ReadPool, "run", run)  # noqa: B010
        event.remove(Engine, "before_cursor_execute", note)


def cost(client: TestClient, target: str) -> int:
    """The fewest statements of three reads of `target` (a key's cached row is read again
    once a second: one read may pay for it)."""
    counts = []
    for _ in range(3):
        with statements() as seen:
            assert client.get(target).status_code == 200
        counts.append(len(seen))
    return min(counts)


def test_a_queued_job_reads_in_the_same_statements_with_5_or_200_queued(
    client: TestClient,
) -> None:
    first = queue_up(5)
    standings.refresh(get_settings())
    few = [cost(client, f"/v1/jobs/{first[-1]}"), cost(client, f"/v1/jobs/{first[-1]}?x=%41")]
    queue_few = cost(client, "/v1/queue")
    queue_up(195)
    standings.refresh(get_settings())
    many = [cost(client, f"/v1/jobs/{first[-1]}"), cost(client, f"/v1/jobs/{first[-1]}?x=%41")]
    assert client.get(f"/v1/jobs/{first[-1]}").json()["queue"]["position"] == 5
    assert many == few  # the fast path and the route (a query it leaves to the route)
    assert 1 <= few[0] <= 2  # the job with its standing, and at most a key's row
    assert cost(client, "/v1/queue") == queue_few


def test_a_job_not_worked_out_yet_reads_queued_without_a_position(client: TestClient) -> None:
    (job_id,) = queue_up(1)
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "queued" and job["wait_reason"] == UNKNOWN
    assert job["queue"] == {"position": None, "reason": UNKNOWN, "estimated_start": None}
    assert client.get("/v1/queue").json()["jobs"][0]["position"] is None


def position(client: TestClient, job_id: str) -> int | None:
    found: int | None = client.get(f"/v1/jobs/{job_id}").json()["queue"]["position"]
    return found


def test_a_claim_or_cancel_elsewhere_moves_the_queue_within_a_round(rounds: TestClient) -> None:
    client = rounds
    first, second, third = queue_up(3)
    wait_until(lambda: position(client, third) == 3, 10, "the maintenance round's standing")
    with session_scope() as session:  # a worker of another process takes the first
        assert crud.claim_job(session, first, "w1", 60) is not None
    wait_until(lambda: position(client, third) == 2, 10, "the claim seen by a round")
    with session_scope() as session:  # a cancel through another API process
        job = crud.get_job(session, second)
        assert job is not None
        crud.request_cancel(session, job)
    wait_until(lambda: position(client, third) == 1, 10, "the cancel seen by a round")
    assert client.get(f"/v1/jobs/{second}").json()["queue"] is None


def test_the_queue_and_each_jobs_read_agree(client: TestClient) -> None:
    ids = queue_up(3, priority=10) + queue_up(2, priority=90)
    submitted = client.post("/v1/jobs", json={**TINY, "priority": 50})  # a submit refreshes
    assert submitted.status_code == 201
    assert submitted.json()["queue"]["position"] == 3
    ids.append(submitted.json()["id"])
    view = client.get("/v1/queue").json()["jobs"]
    assert [entry["position"] for entry in view] == [1, 2, 3, 4, 5, 6]
    for entry in view:
        job = client.get(f"/v1/jobs/{entry['id']}").json()["queue"]
        assert job == {name: entry[name] for name in ("position", "reason", "estimated_start")}
    assert {entry["id"] for entry in view} == set(ids)


def test_the_whole_queue_at_once_stands_as_each_job_alone(client: TestClient) -> None:
    """compute (every job, a few statements per level) against position.standing (one job)."""
    mine, theirs = make_key("mine"), make_key("theirs")
    for key, priority, gpus in ((mine, 50, 0), (theirs, 50, 0), (mine, 90, 1), (theirs, 10, 2)):
        for _ in range(2):
            body = {**TINY, "priority": priority, "resources": {"gpus": gpus}}
            headers = {"Authorization": f"Bearer {key}"}
            assert client.post("/v1/jobs", json=body, headers=headers).status_code == 201
    queue_up(2)  # without a key
    with session_scope() as session:
        for name, gpus in (("small", 0), ("big", 2)):
            session.add(
                Worker(name=name, hostname="h", pid=1, gpus=gpus, devices=[], queues=["gpus-0"])
            )
    settings, now = get_settings(), utcnow()
    with session_scope() as session:
        found = standings.compute(session, settings, now)
        jobs = session.scalars(select(Job).where(Job.status == JobStatus.queued)).all()
        assert len(found) == len(jobs) == 10
        for job in jobs:
            alone = standing(session, job, settings)
            batch = found[job.id]
            assert (batch.position, batch.reason) == (alone.position, alone.reason), job.id
            assert batch.wait_reason == worker_reads.wait_reason(
                session, job, 3 * settings.heartbeat_seconds
            )
