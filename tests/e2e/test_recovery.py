"""Crash recovery with real processes on PostgreSQL + Redis: SIGKILLed workers, redelivered
messages, exhausted restarts. Short heartbeats and leases keep each case to seconds."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from celery import Celery

from app.domain.job_files import JobFiles
from app.domain.states import TERMINAL
from app.services.queue import TRAIN_TASK
from tests.e2e.procs import alive, parent_of, training_children
from tests.helpers import (
    Service,
    metric_attempts,
    running_service,
    scaled,
    wait_for_status,
    wait_until,
)

pytestmark = pytest.mark.e2e

# Short, so kills are noticed fast; scaled, so a busy machine's slow renewal or a child's slow
# way to its next step is not mistaken for a dead worker or one that ignores the stop.
LEASE, GRACE = scaled(3.0), scaled(2.0)
SETTINGS = {
    "EPOCHAL_HEARTBEAT_SECONDS": "1",
    "EPOCHAL_LEASE_SECONDS": f"{LEASE:g}",
    "EPOCHAL_MAINTENANCE_SECONDS": "1",
    "EPOCHAL_DISPATCH_RETRY_SECONDS": "3",
    "EPOCHAL_CANCEL_GRACE_SECONDS": f"{GRACE:g}",
    "EPOCHAL_KILL_GRACE_SECONDS": f"{GRACE:g}",
}
# About a sixth of a second an epoch on one core (250 steps): long enough to kill mid-job,
# short to finish; 12 epochs leave room after the kill at epoch 3 on a fast machine.
EPOCHS = 12
LONG_JOB: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 4000, "features": 32},
    "model": {"hidden_units": [64]},
    "training": {"epochs": EPOCHS, "batch_size": 16},
}


@pytest.fixture(scope="module")
def service(pg_service_env: dict[str, str]) -> Iterator[Service]:
    with running_service(pg_service_env, **SETTINGS) as svc:
        yield svc


@pytest.fixture
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as c:
        yield c


def submit(client: httpx.Client, **spec: Any) -> str:
    response = client.post("/v1/jobs", json={**LONG_JOB, **spec})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def epochs_done(client: httpx.Client, job_id: str) -> int:
    return len(client.get(f"/v1/jobs/{job_id}/metrics").json()["items"])


def kill_worker_group(service: Service, job_id: str) -> tuple[list[int], datetime]:
    """SIGKILL the worker's whole process group (Celery parent and pool child)."""
    children = wait_until(lambda: training_children(job_id), 30, "the training child")
    killed_at = datetime.now(UTC)
    service.stop("worker", sig=signal.SIGKILL)
    return children, killed_at


def freeze_when(
    service: Service, pid: int, frozen_right: Callable[[sa.Connection], bool], what: str
) -> None:
    """SIGSTOP a process, and again after a SIGCONT and a moment, until `frozen_right` (asked
    of the test's database) says it stopped where the test needs it."""
    engine = sa.create_engine(service.env["EPOCHAL_DATABASE_URL"])
    deadline = time.monotonic() + scaled(120)
    try:
        with engine.connect() as conn:
            while time.monotonic() < deadline:
                os.kill(pid, signal.SIGSTOP)
                if frozen_right(conn):
                    return
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.02)
        raise AssertionError(what)
    finally:
        engine.dispose()


def job_write_locks(conn: sa.Connection, idle: bool = False) -> int:
    """Write locks held on `job`; with `idle`, only those of a transaction left idle."""
    query = (
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON l.relation = c.oid "
        "JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE c.relname = 'job' AND l.mode = 'RowExclusiveLock'"
    )
    if idle:
        query += " AND a.state = 'idle in transaction'"
    return int(conn.execute(sa.text(query)).scalar_one())


def freeze_between_transactions(service: Service, pid: int) -> None:
    """SIGSTOP a process, retrying until it is not frozen holding a write lock on `job`."""
    what = "the supervisor kept holding a lock on job"
    freeze_when(service, pid, lambda conn: not job_write_locks(conn), what)


def freeze_holding_the_job_row(service: Service, pid: int) -> None:
    """SIGSTOP a training child, retrying until it is frozen inside a transaction that wrote
    to `job` (its epoch's write takes a few ms of each epoch, so this takes some tries)."""

    def holding(conn: sa.Connection) -> bool:
        if not job_write_locks(conn, idle=True):
            return False
        time.sleep(0.1)  # a live writer's transaction is gone by a second look
        return bool(job_write_locks(conn, idle=True))

    freeze_when(service, pid, holding, "the child was never frozen inside a transaction on job")


def at(transition: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(transition["at"]).astimezone(UTC)


def test_killed_worker_resumes_from_checkpoint_three_times(
    service: Service, client: httpx.Client
) -> None:
    for round_ in range(3):
        job_id = submit(client)
        wait_until(lambda: epochs_done(client, job_id) >= 3, 120, "epoch 3")  # noqa: B023
        children, killed_at = kill_worker_group(service, job_id)
        # The child runs in its own session, out of the killed group: PR_SET_PDEATHSIG ends it.
        wait_until(lambda: not any(alive(p) for p in children), 10, "the orphan to die")  # noqa: B023
        service.start_worker("worker")
        done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 120)
        assert done["status"] == "succeeded", (round_, done["error"])
        assert done["attempt"] == 2 and done["stop_reason"] == "completed"
        rows = metric_attempts(service, job_id)
        assert [epoch for epoch, _ in rows] == list(range(1, EPOCHS + 1))  # one row per epoch
        kept = [epoch for epoch, attempt in rows if attempt == 1]
        # Resumed from the checkpoint (epoch 2 or 3), not from scratch: rows up to it were
        # kept, every later row was written again by attempt 2.
        assert kept == list(range(1, len(kept) + 1)) and len(kept) >= 2
        assert all(attempt == 2 for epoch, attempt in rows if epoch > len(kept))
        transitions = done["transitions"]
        requeue = next(t for t in transitions if t["to_status"] == "queued" and t["attempt"])
        assert "lease expired" in requeue["reason"]
        recovery = (at(requeue) - killed_at).total_seconds()
        print(f"round {round_}: re-queued {recovery:.1f}s after the kill, kept {len(kept)}")
        # The lease plus a maintenance round decide, not the broker's 12 h visibility.
        assert recovery < LEASE + scaled(15)


def test_restarts_exhausted_fail_as_worker_lost(service: Service, client: httpx.Client) -> None:
    job_id = submit(client, max_restarts=0)
    wait_until(lambda: epochs_done(client, job_id) >= 1, 120, "epoch 1")
    kill_worker_group(service, job_id)
    service.start_worker("worker")
    done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 60)
    assert (done["status"], done["stop_reason"], done["error_code"]) == (
        "failed",
        "worker_lost",
        "worker_lost",
    )
    assert done["attempt"] == 1 and "max_restarts=0" in done["error"]


def test_same_message_delivered_twice_runs_once(service: Service, client: httpx.Client) -> None:
    service.start_worker("worker2")  # an idle second worker to take the duplicate at once
    try:
        job_id = submit(client, training={"epochs": 3, "batch_size": 16})
        duplicate = Celery("dup", broker=service.env["EPOCHAL_BROKER_URL"])
        duplicate.conf.update(task_serializer="json", accept_content=["json"])
        duplicate.send_task(TRAIN_TASK, args=[job_id], queue="gpus-0")
        done = wait_for_status(client, job_id, {"succeeded", "failed"}, 120)
        logs = service.logs
        ignored = f"job {job_id} is not queued"
        wait_until(
            lambda: any(ignored in p.read_text(errors="replace") for p in logs.glob("*.log")),
            30,
            "the duplicate message to be received and ignored",
        )
    finally:
        service.stop("worker2")
    assert done["status"] == "succeeded" and done["attempt"] == 1
    assert [t["to_status"] for t in done["transitions"]].count("running") == 1
    assert metric_attempts(service, job_id) == [(1, 1), (2, 1), (3, 1)]


@pytest.mark.parametrize("where", ["anywhere", "inside its transaction"])
def test_child_that_ignores_the_stop_is_terminated_then_killed(
    service: Service, client: httpx.Client, where: str
) -> None:
    job_id = submit(client, training={"epochs": 200, "batch_size": 16})
    wait_until(lambda: epochs_done(client, job_id) >= 1, 120, "epoch 1")
    (child,) = training_children(job_id)
    # A stopped process holds SIGUSR1 and SIGTERM pending. Stopped inside its epoch's
    # transaction, it also holds the job's row, until the server ends that transaction
    # (app.core.db.hold_rows_at_most), well before the supervisor's lease would lapse.
    if where == "anywhere":
        os.kill(child, signal.SIGSTOP)
    else:
        freeze_holding_the_job_row(service, child)
    started = time.monotonic()
    assert client.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelling"
    done = wait_for_status(client, job_id, {"cancelled", "failed", "succeeded"}, 60)
    assert done["status"] == "cancelled" and done["stop_reason"] == "cancelled"
    error = done["error"] or ""  # none: the reaper ended it, the supervisor gave the job up
    assert "did not stop in time" in error and "SIGKILL" in error, done["transitions"]
    assert (
        not alive(child) and time.monotonic() - started >= 2 * GRACE
    )  # the stop's grace, then SIGTERM's
    lines = client.get(f"/v1/jobs/{job_id}/logs").json()["lines"]
    notes = [line for line in lines if "supervisor:" in line]
    assert any("sent SIGTERM" in n for n in notes) and any("sent SIGKILL" in n for n in notes)


def test_runtime_limit_stops_with_a_final_checkpoint(
    service: Service, client: httpx.Client
) -> None:
    """A limit that came before the first epoch's end (a slow box: the child's start is most of
    it) proves nothing about the final checkpoint, so the job runs again with a longer one."""
    for limit in (10, 30, 90):
        # No periodic checkpoints: the one found afterwards is the final one the timeout wrote.
        job_id = submit(
            client,
            # Short epochs (~0.1 s here), so the first one ends soon after the child starts, and
            # all the epochs the spec allows: ~150 s here, so no machine finishes before the
            # limit (200 epochs of LONG_JOB did, in CI, on a fast one).
            dataset={**LONG_JOB["dataset"], "samples": 1000},
            training={"epochs": 1000, "batch_size": 16},
            max_runtime_seconds=round(scaled(limit)),
            checkpoint_every_epochs=1000,
        )
        done = wait_for_status(client, job_id, {"cancelled", "failed", "succeeded"}, 60 + limit)
        assert (done["status"], done["stop_reason"], done["error_code"]) == (
            "failed",
            "timeout",
            "timeout",
        )
        finished = epochs_done(client, job_id)
        if finished:
            break
    assert 1 <= finished < 1000 and done["attempt"] == 1
    files = JobFiles.of(Path(service.env["EPOCHAL_HOME"]) / "artifacts", job_id)
    assert files.latest.read_text().strip() == f"epoch-{finished:04d}"


def test_queue_timeout_fails_a_job_no_worker_can_take(client: httpx.Client) -> None:
    response = client.post(
        "/v1/jobs", json={**LONG_JOB, "resources": {"gpus": 1}, "max_queue_seconds": 2}
    )
    job = response.json()
    assert "GPUs" in (job["wait_reason"] or "")  # the worker here has none
    done = wait_for_status(client, job["id"], {"failed"}, 30)
    assert (done["stop_reason"], done["error_code"], done["attempt"]) == (
        "queue_timeout",
        "queue_timeout",
        0,
    )


def test_non_finite_loss_fails_without_retry_and_logs_say_why(client: httpx.Client) -> None:
    # Raw N(0, 1) inputs and plain SGD at rate 10 blow the weights up within the first steps.
    job_id = submit(
        client,
        dataset={"name": "synthetic", "samples": 2000, "normalize": "none"},
        optimizer={"name": "sgd", "learning_rate": 10},
        training={"epochs": 5, "batch_size": 16},
    )
    done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 60)
    assert (done["status"], done["stop_reason"], done["error_code"]) == (
        "failed",
        "non_finite_loss",
        "non_finite_loss",
    )
    assert done["attempt"] == 1 and "lower the learning rate" in done["error"]
    assert [t["to_status"] for t in done["transitions"]] == ["queued", "running", "failed"]
    log = client.get(f"/v1/jobs/{job_id}/logs", params={"tail": 2}).json()
    assert len(log["lines"]) == 2 and log["truncated"]
    assert "ended: failed (non_finite_loss)" in log["lines"][-1]
    assert client.get(f"/v1/jobs/{job_id}/logs", params={"tail": 0}).status_code == 422


def test_cancel_racing_completion_both_orders(service: Service, client: httpx.Client) -> None:
    # A long lease: the supervisor is frozen below and must not be taken for dead.
    service.stop("worker")
    service.start_worker("race", {"EPOCHAL_LEASE_SECONDS": "60"})
    try:
        # Long enough (a second or more of training) that the child cannot come and go
        # between two looks at /proc on a busy machine, short enough to finish while frozen.
        job_id = submit(client, **{**LONG_JOB, "training": {"epochs": 6, "batch_size": 16}})
        (child,) = wait_until(lambda: child_or_end(client, job_id), 60, "the training child", 0.05)
        supervisor = parent_of(child)
        # Freeze the supervisor so the child finishes unseen: the cancel then arrives after
        # the last epoch and before the end is recorded, deterministically.
        freeze_between_transactions(service, supervisor)
        try:
            outcome = JobFiles.of(Path(service.env["EPOCHAL_HOME"]) / "artifacts", job_id).outcome(
                1
            )
            wait_until(outcome.exists, 60, "the child's outcome")
            cancel = client.post(f"/v1/jobs/{job_id}/cancel")
            assert cancel.status_code == 200 and cancel.json()["status"] == "cancelling"
        finally:
            os.kill(supervisor, signal.SIGCONT)
        done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 60)
        # The work is complete, so it stays complete: succeeded, and the record says why.
        assert done["status"] == "succeeded" and done["stop_reason"] == "completed"
        transitions = done["transitions"]
        assert [t["to_status"] for t in transitions] == [
            "queued",
            "running",
            "cancelling",
            "succeeded",
        ]
        assert "cancel arrived after the last epoch" in transitions[-1]["reason"]
        # The other order: the end is recorded first, so there is nothing left to cancel.
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    finally:
        service.stop("race")
        service.start_worker("worker")


def child_or_end(client: httpx.Client, job_id: str) -> list[int]:
    """The job's training child; fails at once (not at the timeout) if the job ended unseen."""
    children = training_children(job_id)
    if not children and client.get(f"/v1/jobs/{job_id}").json()["status"] in TERMINAL:
        raise AssertionError(f"job {job_id} ended before its training child was seen")
    return children
