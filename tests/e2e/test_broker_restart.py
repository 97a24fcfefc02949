"""A broker that goes away loses no job: a private redis-server (never the shared one) is
stopped at submit time and restarted empty under queued jobs; the reconciler re-sends them."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from tests.conftest import PG_ADMIN
from tests.helpers import (
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate_in_subprocess,
    running_service,
    scaled,
    wait_for_status,
    wait_until,
)

pytestmark = pytest.mark.e2e
JOB = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}


class PrivateRedis:
    """A redis-server of this test's own, without persistence: a restart starts empty."""

    def __init__(self, folder: Path) -> None:
        self.port, self.folder = free_port(), folder
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        wait_until(lambda: _pings(client), 10, "the private redis-server")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=scaled(10))
            self.process = None

    def messages(self, queue: str) -> int:
        client = redis.Redis(port=self.port)
        return sum(int(client.llen(key)) for key in client.keys(f"{queue}*"))


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def env(tmp_path: Path, broker: PrivateRedis) -> Iterator[dict[str, str]]:
    name = f"epochal_e2e_{secrets.token_hex(4)}"
    settings = {
        "EPOCHAL_HOME": str(tmp_path / "home"),
        "EPOCHAL_DATABASE_URL": create_pg_database(PG_ADMIN, name),
        "EPOCHAL_BROKER_URL": broker.url,
    }
    migrate_in_subprocess(settings)
    yield settings
    drop_pg_database(PG_ADMIN, name)


def dispatched(env: dict[str, str], job_id: str) -> bool:
    engine = sa.create_engine(env["EPOCHAL_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT dispatched_at FROM job WHERE id = :j")
            return conn.execute(query, {"j": job_id}).scalar() is not None
    finally:
        engine.dispose()


def test_broker_down_at_submit_and_restarted_empty_loses_nothing(
    env: dict[str, str], broker: PrivateRedis
) -> None:
    with (
        running_service(env, worker=False, EPOCHAL_DISPATCH_RETRY_SECONDS="2") as service,
        service.client() as client,
    ):
        broker.stop()  # down at submit: the job is stored, the publish fails, no 500
        response = client.post("/v1/jobs", json=JOB)
        assert response.status_code == 201 and response.json()["status"] == "queued"
        first = response.json()["id"]
        # Nothing was sent. (Whether dispatched_at is clear at this instant is a race: the
        # failed publish clears it, and the next maintenance round may already be retrying.)
        assert client.get(f"/v1/jobs/{first}").json()["status"] == "queued"
        ready = client.get("/readyz")  # a load balancer sees which dependency is missing
        assert ready.status_code == 503
        expected = {"status": "unavailable", "database": "ok", "broker": "unreachable"}
        assert ready.json() == expected | {"store": "ok"}  # the store is shown, not required
        broker.start()
        ready_again = client.get("/readyz").json()
        assert ready_again == {"status": "ok", "database": "ok", "broker": "ok", "store": "ok"}
        # The message itself, not dispatched_at: a send that started while the broker was down
        # stamps the row first and clears the stamp when it fails.
        wait_until(lambda: broker.messages("gpus-0") == 1, 30, "the reconciler to publish")
        assert dispatched(env, first)
        second = client.post("/v1/jobs", json=JOB).json()["id"]
        assert broker.messages("gpus-0") == 2

        broker.stop()  # restarted empty while both wait for a worker: the messages are gone
        broker.start()
        assert broker.messages("gpus-0") == 0
        service.start_worker()
        for job_id in (first, second):
            done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 120)
            assert done["status"] == "succeeded" and done["attempt"] == 1
            assert [t["to_status"] for t in done["transitions"]].count("running") == 1


def test_broker_restart_under_a_running_job_does_not_disturb_it(
    env: dict[str, str], broker: PrivateRedis
) -> None:
    long_job = {
        "framework": "pytorch",
        "dataset": {"name": "synthetic", "samples": 12000},
        "model": {"hidden_units": [64]},
        "training": {"epochs": 6, "batch_size": 16},
    }
    with (
        running_service(env, EPOCHAL_DISPATCH_RETRY_SECONDS="2") as service,
        service.client() as client,
    ):
        job_id = client.post("/v1/jobs", json=long_job).json()["id"]
        metrics = f"/v1/jobs/{job_id}/metrics"
        wait_until(lambda: len(client.get(metrics).json()["items"]) >= 2, 120, "epoch 2")
        broker.stop()  # the trainer talks to the database, not the broker: it goes on
        broker.start()
        done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 120)
        assert done["status"] == "succeeded" and done["attempt"] == 1
        # The worker consumes again after the restart (the celery#8030 class of bug).
        after = client.post("/v1/jobs", json=JOB).json()["id"]
        assert wait_for_status(client, after, {"succeeded", "failed"}, 120)["status"] == "succeeded"
