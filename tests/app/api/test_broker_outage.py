"""A submit while the broker is down retries its publish for seconds; it holds no database
session (no DB slot, no pooled connection) meanwhile. With one connection and one slot, and
nothing listening where the broker should be, a request that needs the database is answered
while the submit is still retrying. On PostgreSQL, in-process (one event loop, real threads)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.pool import NullPool

from app.api import deps
from app.core import db
from tests.conftest import make_key
from tests.helpers import (
    PG_ADMIN,
    clear_caches,
    configure,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate,
    scaled,
    wait_until,
)

JOB = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}
SWEEP = {
    "name": "outage",
    "base": JOB,
    "parameters": {"optimizer.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 1e-1}},
    "objective": {"metric": "val_accuracy"},
    "max_trials": 2,
    "max_parallel": 2,
}


@pytest.fixture
def database() -> Iterator[str]:
    """A database of its own: a sweep leaves Optuna's tables behind."""
    name = f"epochal_outage_{secrets.token_hex(4)}"
    yield create_pg_database(PG_ADMIN, name)
    drop_pg_database(PG_ADMIN, name)


@pytest.fixture
def outage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: str) -> Iterator[TestClient]:
    """The API on a pool of one connection and one DB slot; the broker's port is closed."""
    env = {
        "EPOCHAL_HOME": str(tmp_path / "home"),
        "EPOCHAL_DATABASE_URL": database,
        "EPOCHAL_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0",
        "EPOCHAL_MAINTENANCE_SECONDS": "600",  # only the requests publish here
    }
    configure(monkeypatch, env)
    migrate()
    monkeypatch.setattr(db, "POOL_SIZE", 1)
    monkeypatch.setattr(db, "POOL_OVERFLOW", 0)
    monkeypatch.setattr(deps, "DB_SLOTS", 1)
    clear_caches()
    from app.main import create_app

    key = make_key(f"outage-{secrets.token_hex(2)}")
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {key}"
        yield client


def publishing(url: str) -> list[str]:
    """Ids of jobs claimed for sending: their submit is in its publish (the broker is down)."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            query = "SELECT id FROM job WHERE dispatched_at IS NOT NULL"
            return [row[0] for row in conn.execute(sa.text(query))]
    finally:
        engine.dispose()


@pytest.mark.parametrize(("path", "body"), [("/v1/jobs", JOB), ("/v1/sweeps", SWEEP)])
def test_a_submit_retrying_a_down_broker_holds_no_database_session(
    outage: TestClient, database: str, path: str, body: dict[str, Any]
) -> None:
    submitted: dict[str, httpx.Response] = {}
    submit = threading.Thread(target=lambda: submitted.update(r=outage.post(path, json=body)))
    started = time.monotonic()
    submit.start()
    job_id = wait_until(lambda: publishing(database), 30, "the submit to publish", 0.02)[0]
    asked = time.monotonic()
    answer = outage.get(f"/v1/jobs/{job_id}")  # needs the one slot and the one connection
    answered, still_retrying = time.monotonic(), submit.is_alive()
    submit.join(scaled(60))
    print(
        f"{path}: answered in {answered - asked:.3f}s; "
        f"the submit took {time.monotonic() - started:.2f}s"
    )
    assert answer.status_code == 200 and answer.json()["status"] == "queued"
    # Before, the submit kept its DB slot through the retries: this answer waited for them.
    assert still_retrying, "the request was answered only after the submit's publish ended"
    assert submitted["r"].status_code == 201, submitted["r"].text
    assert publishing(database) == []  # nothing was sent: the reconciler will send them
