"""A request the database cannot serve (its sessions cut mid-use, the server refusing
connections) is a 503 with Retry-After and the problem shape, never a 500 or a traceback; once
the database is back the same requests succeed. Real PostgreSQL: the test's own database is
closed to new connections and every session of it terminated."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.api.errors import DB_RETRY_AFTER_SECONDS
from tests.conftest import make_key, make_service_env
from tests.helpers import PG_ADMIN, configure

pytestmark = pytest.mark.postgres
SPEC = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}


@pytest.fixture
def private_pg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Settings on a PostgreSQL database of this test's own (it will be closed to everyone)."""
    with make_service_env("postgres", tmp_path / "home") as env:
        configure(monkeypatch, {**env, "EPOCHAL_DB_CONNECT_TIMEOUT_SECONDS": "2"})
        yield str(make_url(env["EPOCHAL_DATABASE_URL"]).database)


def admin(sql: str) -> None:
    engine = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(sql)
    engine.dispose()


def close_database(name: str, allow: bool) -> None:
    """Refuse (or allow again) new connections to `name`; refusing also cuts every session."""
    admin(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {"true" if allow else "false"}')
    if not allow:
        admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")


def test_requests_get_503_while_the_database_is_away(private_pg: str) -> None:
    from app.main import create_app

    headers = {"Authorization": f"Bearer {make_key('tester')}"}
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        job_id = client.post("/v1/jobs", headers=headers, json=SPEC).json()["id"]
    routes = [
        ("GET", f"/v1/jobs/{job_id}"),  # the ORM session
        ("GET", f"/v1/jobs/{job_id}/metrics"),  # the async pool on the event loop
        ("GET", "/v1/jobs?status=running"),
        ("POST", "/v1/jobs"),  # a write
    ]
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        for method, path in routes:  # every pool has a connection to lose
            assert client.request(method, path, headers=headers, json=SPEC).status_code < 300
        close_database(private_pg, allow=False)
        for method, path in routes:
            response = client.request(method, path, headers=headers, json=SPEC)
            assert response.status_code == 503, (path, response.text)
            assert response.headers["Retry-After"] == str(DB_RETRY_AFTER_SECONDS)
            assert response.headers["content-type"].startswith("application/problem+json")
            body = response.json()
            assert body["detail"] == "database unavailable; retry shortly"
            assert "Traceback" not in response.text and "psycopg" not in response.text
        close_database(private_pg, allow=True)
        for method, path in routes:
            response = client.request(method, path, headers=headers, json=SPEC)
            assert response.status_code < 300, (path, response.text)


def test_reads_come_back_with_the_database_not_after_the_pools_backoff(
    private_pg: str,
) -> None:
    # A pool that retries a failed connect after 1, 2, 4, 8 ... s (psycopg_pool, used before)
    # can make its next try seconds after the server is back (app.core.async_db has no backoff).
    from app.main import create_app

    headers = {"Authorization": f"Bearer {make_key('tester')}"}
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        job_id = client.post("/v1/jobs", headers=headers, json=SPEC).json()["id"]
        path = f"/v1/jobs/{job_id}/metrics"
        assert client.get(path, headers=headers).status_code == 200
        close_database(private_pg, allow=False)
        outage_ends = time.monotonic() + 10
        while time.monotonic() < outage_ends:
            assert client.get(path, headers=headers).status_code == 503
            time.sleep(0.5)
        close_database(private_pg, allow=True)
        assert client.get(path, headers=headers).status_code == 200
