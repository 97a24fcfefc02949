"""Database faults under a running job, with real processes: sessions terminated by the server,
a server restart (a private PostgreSQL, never the shared one), and a network path that hangs
(a proxy that stops forwarding). Blips cost no attempt; a hang stops the child before its lease
could expire, and the attempt that lost the lease changes nothing of its successor's."""

from __future__ import annotations

import os
import secrets
import select
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from app.domain.job_files import JobFiles
from tests.e2e.db_servers import PrivatePostgres, StallingProxy, private_postgres
from tests.e2e.procs import training_children
from tests.helpers import (
    PG_ADMIN,
    REDIS,
    create_pg_database,
    drop_pg_database,
    migrate_in_subprocess,
    pick_redis_db,
    running_service,
    scaled,
    wait_for_status,
    wait_until,
)

pytestmark = pytest.mark.e2e
EPOCHS = 12
# Digits with a small model: a few tenths of a second an epoch on a loaded core.
JOB: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [32]},
    "training": {"epochs": EPOCHS, "batch_size": 32},
}
ENDED = {"succeeded", "failed", "cancelled"}


def query(url: str, sql: str, **params: Any) -> list[Any]:
    """Rows from a connection of the test's own (none when the server is away)."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(sql), params))
    except sa.exc.OperationalError:
        return []
    finally:
        engine.dispose()


def epoch_rows(url: str, job_id: str) -> list[tuple[int, int]]:
    sql = "SELECT epoch, attempt FROM epoch_metric WHERE job_id = :j ORDER BY epoch"
    return [(int(e), int(a)) for e, a in query(url, sql, j=job_id)]


def job_row(url: str, job_id: str) -> Any:
    rows = query(url, "SELECT status, attempt, lease_expires_at FROM job WHERE id = :j", j=job_id)
    return rows[0] if rows else None


def rows_reach(url: str, job_id: str, epoch: int) -> bool:
    return len(epoch_rows(url, job_id)) >= epoch


@contextmanager
def frozen(job_id: str) -> Iterator[None]:
    """The job's training process stopped meanwhile (SIGSTOP), wherever it is, a transaction
    included: the fault lands while the job runs however fast its epochs are."""
    pids = training_children(job_id)
    assert pids, "no training process: has the job ended already?"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def terminate_sessions(url: str) -> int:
    """pg_terminate_backend on every other session of the test database (API, worker, child)."""
    sql = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    return int(query(url, sql)[0][0])


def wait_for_exits(pidfds: list[int], timeout: float) -> None:
    """Until every process behind these pidfds has exited (each becomes readable then)."""
    assert pidfds, "no training child found"
    deadline, waiting = time.monotonic() + timeout, list(pidfds)
    while waiting:
        left = deadline - time.monotonic()
        assert left > 0, f"{len(waiting)} training process(es) still alive after {timeout:g}s"
        ready, _, _ = select.select(waiting, [], [], left)
        waiting = [fd for fd in waiting if fd not in ready]
    for fd in pidfds:
        os.close(fd)


@pytest.fixture
def private_env(tmp_path: Path) -> Iterator[tuple[dict[str, str], PrivatePostgres]]:
    """A migrated database on a private PostgreSQL, and a Redis DB number of its own."""
    broker, client = pick_redis_db(REDIS)
    with private_postgres() as server:
        env = {
            "EPOCHAL_HOME": str(tmp_path / "home"),
            "EPOCHAL_DATABASE_URL": server.create_database("epochal"),
            "EPOCHAL_BROKER_URL": broker,
        }
        migrate_in_subprocess(env)
        try:
            yield env, server
        finally:
            client.flushdb()


def test_terminated_sessions_and_a_server_restart_cost_no_attempt(
    private_env: tuple[dict[str, str], PrivatePostgres],
) -> None:
    env, server = private_env
    url = env["EPOCHAL_DATABASE_URL"]
    with running_service(env) as service, service.client() as client:
        job_id = client.post("/v1/jobs", json=JOB).json()["id"]
        log = JobFiles.of(Path(env["EPOCHAL_HOME"]) / "artifacts", job_id).log
        for epoch in (2, 3, 4):  # three blips, each after the child wrote a row since the last
            wait_until(lambda: rows_reach(url, job_id, epoch), 120, f"epoch {epoch}", 0.02)  # noqa: B023
            with frozen(job_id):
                assert tuple(job_row(url, job_id)[:2]) == ("running", 1)
                print(f"after epoch {epoch}: terminated {terminate_sessions(url)} sessions")
        wait_until(lambda: rows_reach(url, job_id, 5), 120, "epoch 5", 0.02)
        with frozen(job_id):
            server.stop()  # a restart: every session ends, and for a while nobody can connect
        down = time.monotonic()
        # The child met the outage at its next epoch's row, and waits for the server.
        wait_until(lambda: "database unavailable" in log.read_text(), 60, "the child to retry")
        server.start()
        print(f"server down {time.monotonic() - down:.1f}s")
        done = wait_for_status(client, job_id, ENDED, 180)
        assert (done["status"], done["attempt"]) == ("succeeded", 1), done["error"]
        assert epoch_rows(url, job_id) == [(epoch, 1) for epoch in range(1, EPOCHS + 1)]
        assert [t["to_status"] for t in done["transitions"]].count("running") == 1


LEASE, HEARTBEAT = 4.0, 1.0
HANG_SETTINGS = {
    "EPOCHAL_HEARTBEAT_SECONDS": str(HEARTBEAT),
    "EPOCHAL_LEASE_SECONDS": str(LEASE),
    "EPOCHAL_DISPATCH_RETRY_SECONDS": "2",
    # Within the lease, as it should be: a transaction the hung worker left open holds the
    # job's row, and the reaper can re-queue the job only once the server has ended it.
    "EPOCHAL_DB_STATEMENT_TIMEOUT_SECONDS": "3",
}


@pytest.fixture
def shared_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    name = f"epochal_e2e_{secrets.token_hex(4)}"
    broker, client = pick_redis_db(REDIS)
    env = {
        "EPOCHAL_HOME": str(tmp_path / "home"),
        "EPOCHAL_DATABASE_URL": create_pg_database(PG_ADMIN, name),
        "EPOCHAL_BROKER_URL": broker,
    }
    migrate_in_subprocess(env)
    yield env
    client.flushdb()
    drop_pg_database(PG_ADMIN, name)


def test_a_hung_database_stops_the_child_before_its_lease_expires(
    shared_env: dict[str, str],
) -> None:
    url = shared_env["EPOCHAL_DATABASE_URL"]
    target = sa.make_url(url)
    proxy = StallingProxy((target.host or "127.0.0.1", target.port or 5432))
    try:
        with (
            running_service(shared_env, worker=False, **HANG_SETTINGS) as service,
            service.client() as client,
        ):
            # The first worker reaches PostgreSQL only through the proxy; the API (and its
            # reaper) and the second worker connect directly.
            service.start_worker("hung", {"EPOCHAL_DATABASE_URL": proxy.url_for(url)})
            job_id = client.post("/v1/jobs", json=JOB).json()["id"]
            wait_until(lambda: len(epoch_rows(url, job_id)) >= 3, 120, "epoch 3")
            exits = [os.pidfd_open(pid) for pid in training_children(job_id)]
            proxy.stall()
            stalled = time.monotonic()
            wait_for_exits(exits, scaled(30))  # woken by the kernel as the child dies
            stopped_at, stopped = datetime.now(UTC), time.monotonic()
            status, attempt, lease_expires_at = job_row(url, job_id)
            margin = (lease_expires_at.astimezone(UTC) - stopped_at).total_seconds()
            print(
                f"child stopped {stopped - stalled:.2f}s after the stall, "
                f"{margin:.2f}s before its lease (of {LEASE:g}s) expired"
            )
            assert (status, attempt) == ("running", 1)  # the reaper has not taken it yet
            assert margin > 0, "the child outlived the lease of its attempt"
            service.start_worker("direct")
            wait_until(
                lambda: any(a == 2 for _, a in epoch_rows(url, job_id)), 120, "attempt 2's rows"
            )
            proxy.resume()  # what the lost attempt had in flight reaches the server now
            done = wait_for_status(client, job_id, ENDED, 180)
    finally:
        proxy.close()
    assert (done["status"], done["attempt"]) == ("succeeded", 2), done["error"]
    rows = epoch_rows(url, job_id)
    assert [epoch for epoch, _ in rows] == list(range(1, EPOCHS + 1))
    kept = [epoch for epoch, attempt in rows if attempt == 1]
    # Attempt 1's rows up to its checkpoint stay; every later one is attempt 2's.
    assert kept == list(range(1, len(kept) + 1))
    assert all(attempt == 2 for epoch, attempt in rows if epoch > len(kept))
    requeue = [t for t in done["transitions"] if t["to_status"] == "queued" and t["attempt"]]
    assert len(requeue) == 1 and "lease expired" in requeue[0]["reason"]
