"""The polled routes' fast path (app.domain.job_reads, app.core.async_db, app.api.responses):
the same bytes the response models would write, keys cached for at most a second, reads that
never take SQLite's write lock, and pooled async connections that survive a server drop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text, update

from app.api.routes.jobs import summary
from app.core import db
from app.core.async_db import POOL_SIZE, close_pool, fetch
from app.core.config import get_settings
from app.core.db import read_engine, session_scope
from app.domain import crud, epoch_rows, job_reads
from app.domain.tables import ApiKey, utcnow
from app.schemas.api import JobsPublic, MetricRow, MetricsPublic
from tests.conftest import make_key
from tests.helpers import wait_until

BODY = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 4}}


@pytest.fixture
def client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('reader')}"
        yield test_client


def test_list_and_metrics_are_the_bytes_the_models_would_write(client: TestClient) -> None:
    tags = [{"team": "vision"}, {"note": "é ✓ \u0000"}, {}]
    ids = [client.post("/v1/jobs", json={**BODY, "tags": t}).json()["id"] for t in tags]
    with session_scope() as session:
        running = crud.claim_job(session, ids[1], "w", 30)
        assert running is not None
    with session_scope() as session:
        for n, loss in ((1, 0.5), (2, float("nan")), (3, 1e-7)):
            logs = {"train_loss": loss, "val_accuracy": 1 / 3, "epoch_seconds": 12.25}
            epoch_rows.record_epoch(session, ids[1], 1, n, logs, best=(n, 1 / 3))
    page = client.get("/v1/jobs", params={"limit": 2})
    rest = client.get("/v1/jobs", params={"limit": 2, "cursor": page.json()["next_cursor"]})
    running_page = client.get("/v1/jobs", params={"status": "running"})
    metrics = client.get(f"/v1/jobs/{ids[1]}/metrics", params={"since_epoch": 1})
    with session_scope() as session:
        first, cursor = job_reads.list_jobs(session, limit=2)
        second, _ = job_reads.list_jobs(session, limit=2, cursor=cursor)
        busy, _ = job_reads.list_jobs(session, limit=50, status="running")
        expected = [
            JobsPublic(items=[summary(j) for j in first], next_cursor=cursor),
            JobsPublic(items=[summary(j) for j in second]),
            JobsPublic(items=[summary(j) for j in busy]),
        ]
        rows = epoch_rows.read_metrics(session, ids[1], since_epoch=1)
        expected_metrics = MetricsPublic(
            job_id=ids[1], items=[MetricRow.model_validate(r) for r in rows]
        )
    for response, model in zip((page, rest, running_page), expected, strict=True):
        assert response.status_code == 200 and response.content == model.model_dump_json().encode()
    assert [j["id"] for j in running_page.json()["items"]] == [ids[1]]
    assert metrics.content == expected_metrics.model_dump_json().encode()
    assert metrics.json()["items"][0]["train_loss"] is None  # NaN is served as null


def test_a_revocation_by_another_process_takes_effect_within_a_second(
    client: TestClient,
) -> None:
    key = make_key("soon-revoked")
    headers = {"Authorization": f"Bearer {key}"}
    assert client.get("/v1/jobs", headers=headers).status_code == 200  # its row is cached now
    with session_scope() as session:  # as `epochal keys revoke` in another process: no forget
        session.execute(
            update(ApiKey).where(ApiKey.id == key.split("_")[1]).values(revoked_at=utcnow())
        )

    def refused() -> bool:
        return client.get("/v1/jobs", headers=headers).status_code == 401

    wait_until(refused, 3, "the revoked key to be refused")


def test_reads_never_take_the_sqlite_write_lock(sqlite_env: dict[str, str]) -> None:
    other = sqlite3.connect(get_settings().sqlalchemy_url.removeprefix("sqlite:///"), timeout=0)
    try:
        with read_engine().connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM job")).scalar() == 0
            other.execute("BEGIN IMMEDIATE")  # a writer gets the lock while the read is open
            other.rollback()
    finally:
        other.close()


@pytest.mark.parametrize("idle", [False, True], ids=["just-used", "idle-a-while"])
def test_a_pooled_async_connection_killed_while_idle_is_replaced_not_failed(
    pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, idle: bool
) -> None:
    pid = select(func.pg_backend_pid())

    async def scenario() -> tuple[int, int]:
        try:
            first = (await fetch(pid, {}))[0][0]
            # The server drops it (a restart, a timeout) while the loop is busy elsewhere: the
            # next read comes before the loop has read the server's goodbye.
            with db.get_engine().connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
                conn.execute(text("SELECT pg_sleep(0.2)"))  # the goodbye reaches our socket
            if idle:
                monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)
            return first, (await fetch(pid, {}))[0][0]
        finally:
            await close_pool()

    first, second = asyncio.run(scenario())
    assert second != first  # answered, on a new connection


def test_reads_beyond_the_pool_wait_for_a_connection_and_never_open_more(
    pg_env: dict[str, str],
) -> None:
    pid = select(func.pg_backend_pid(), func.pg_sleep(0.05))

    async def scenario() -> set[int]:
        try:
            found = await asyncio.gather(*(fetch(pid, {}) for _ in range(3 * POOL_SIZE)))
            return {rows[0][0] for rows in found}
        finally:
            await close_pool()

    backends = asyncio.run(scenario())
    assert 2 <= len(backends) <= POOL_SIZE  # side by side, on at most POOL_SIZE connections
