"""Concurrent submits with one Idempotency-Key make one job (RELIABILITY.md §4): on PostgreSQL
the unique index decides, on SQLite BEGIN IMMEDIATE serializes them; the losers get the winner."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.core.db import session_scope
from app.domain.tables import Job
from tests.app.api.test_auth import BODY, auth
from tests.conftest import make_key

SUBMITS = 30


@pytest.fixture
def api(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield client


def test_concurrent_submits_with_one_key_make_one_job(api: TestClient) -> None:
    headers = {**auth(make_key("retrying")), "Idempotency-Key": "order-7"}

    def submit(_: int) -> tuple[int, str]:
        response = api.post("/v1/jobs", json=BODY, headers=headers)
        return response.status_code, response.json().get("id", response.text)

    with ThreadPoolExecutor(SUBMITS) as pool:
        answers = list(pool.map(submit, range(SUBMITS)))
    assert sorted(code for code, _ in answers) == [200] * (SUBMITS - 1) + [201], answers
    assert len({job_id for _, job_id in answers}) == 1
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 1
