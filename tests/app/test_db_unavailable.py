"""A request the database cannot serve (its sessions cut mid-use, the server refusing
connections) is a 503 with Retry-After and the problem shape, never a 500 or a traceback; once
the database is back the same requests succeed. Real PostgreSQL: the test's own database is
closed to new connections and every session of it terminated."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.api.errors import DB_RETRY_AFTER_SECONDS
from tests.conftest import make_key
from tests.helpers import (
    PG_ADMIN,
    REDIS,
    configure,
    create_pg_database,
    drop_pg_database,
    migrate,
    pick_redis_db,
)

pytestmark = pytest.mark.postgres
SPEC = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}


@pytest.fixture
def private_pg(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """Settings on a PostgreSQL database of this test's own (it will be closed to everyone)."""
    name = f"epochal_unavailable_{secrets.token_hex(4)}"
    broker, redis_client = pick_redis_db(REDIS)
    env = {
        "EPOCHAL_HOME": str(tmp_path / "home"),
        "EPOCHAL_DATABASE_URL": create_pg_database(PG_ADMIN, name),
        "EPOCHAL_BROKER_URL": broker,
        "EPOCHAL_DB_CONNECT_TIMEOUT_SECONDS": "2",
    }
    configure(monkeypatch, env)
    migrate()
    try:
        yield name
    finally:
        admin(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
        drop_pg_database(PG_ADMIN, name)
        redis_client.flushdb()


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
