"""Multi-device jobs through the real service: two CPU replicas in each framework (two logical
devices under MirroredStrategy; two gloo DDP ranks), and DDP ranks that stop together.

PostgreSQL + Redis only (the production setup): the multi-device paths do not touch the
database differently from single-device ones, and the suite's time is better spent elsewhere.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.procs import alive, parent_of, training_children
from tests.helpers import Service, running_service, scaled, wait_for_status, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.parametrize("service_env", ["postgres"], indirect=True),
]

# A two-rank PyTorch job with far more epochs than a test waits for.
LONG_DDP: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 40000},
    "training": {"epochs": 200, "batch_size": 32},
    "resources": {"replicas": 2},
}


@pytest.fixture(scope="module")
def service(service_env: dict[str, str]) -> Iterator[Service]:
    with running_service(service_env, EPOCHAL_CANCEL_GRACE_SECONDS="60") as svc:
        yield svc


@pytest.fixture
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as c:
        yield c


def submit(client: httpx.Client, **spec: Any) -> str:
    response = client.post("/v1/jobs", json={"dataset": {"name": "digits"}, **spec})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def rows(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    return list(client.get(f"/v1/jobs/{job_id}/metrics").json()["items"])


def assert_no_training_processes_left(job_id: str) -> None:
    wait_until(lambda: not training_children(job_id), 30, f"job {job_id}'s processes to exit")


def ended(client: httpx.Client, job_id: str, timeout: float = 240) -> dict[str, Any]:
    done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, timeout)
    assert_no_training_processes_left(job_id)
    return done


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_two_replicas_train_like_one(client: httpx.Client, framework: str) -> None:
    spec = {
        "framework": framework,
        "model": {"hidden_units": [128, 64]},
        "training": {"epochs": 6, "batch_size": 64},
        "regularization": {"l2": 0.0001},
    }
    two = submit(client, **spec, resources={"replicas": 2})
    one = submit(client, **spec)
    done_two, done_one = ended(client, two), ended(client, one)
    assert done_two["status"] == "succeeded", done_two["error"]
    assert done_one["status"] == "succeeded", done_one["error"]
    assert [r["epoch"] for r in rows(client, two)] == list(range(1, 7))  # one row per epoch
    # as the framework counted them: DDP's process group, MirroredStrategy's replicas in sync
    strategy = "ddp" if framework == "pytorch" else "mirrored"
    assert (done_two["result"]["replicas"], done_two["result"]["strategy"]) == (2, strategy)
    assert (done_one["result"]["replicas"], done_one["result"]["strategy"]) == (1, "single")
    accuracy_two = done_two["result"]["val_accuracy"]
    assert accuracy_two >= 0.9
    assert abs(accuracy_two - done_one["result"]["val_accuracy"]) <= 0.02


def test_ddp_early_stopping_ends_both_ranks(client: httpx.Client) -> None:
    job = submit(
        client,
        framework="pytorch",
        training={"epochs": 40, "batch_size": 64},
        resources={"replicas": 2},
        early_stopping={"patience": 2, "min_delta": 10.0},  # nothing counts as better
    )
    done = ended(client, job)
    assert (done["status"], done["stop_reason"]) == ("succeeded", "early_stopping")
    assert [r["epoch"] for r in rows(client, job)] == [1, 2, 3]


def test_ddp_cancel_stops_both_ranks(client: httpx.Client) -> None:
    job = submit(
        client,
        **LONG_DDP,
    )
    wait_until(lambda: len(rows(client, job)) >= 1, 120, "the first epoch")
    ranks = wait_until(
        lambda: len(training_children(job)) >= 3 and training_children(job), scaled(10), "ranks"
    )
    assert len(ranks) == 3  # the launcher and two ranks
    cancelled_at = time.monotonic()
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 200
    done = ended(client, job, timeout=60)
    # stopped by the ranks' agreed decision, not by the supervisor's SIGTERM after 60 s
    assert time.monotonic() - cancelled_at < scaled(30)
    assert (done["status"], done["stop_reason"]) == ("cancelled", "cancelled")
    epochs = [r["epoch"] for r in rows(client, job)]
    assert 1 <= len(epochs) < 200 and epochs == list(range(1, len(epochs) + 1))
    assert not any(alive(pid) for pid in ranks)


def test_ddp_ranks_die_with_their_launcher(client: httpx.Client) -> None:
    """RELIABILITY.md §1: a launcher killed outright takes its ranks along, by their own
    PR_SET_PDEATHSIG alone (the supervisor is frozen meanwhile, so it cannot clean up)."""
    job = submit(
        client,
        **LONG_DDP,
        max_restarts=0,
    )
    found = wait_until(
        lambda: len(training_children(job)) >= 3 and training_children(job), 120, "ranks"
    )
    launcher = next(pid for pid in found if parent_of(pid) not in found)
    ranks = [pid for pid in found if pid != launcher]
    assert len(ranks) == 2 and all(parent_of(pid) == launcher for pid in ranks)
    supervisor = parent_of(launcher)
    os.kill(supervisor, signal.SIGSTOP)
    try:
        os.kill(launcher, signal.SIGKILL)
        wait_until(lambda: not any(alive(pid) for pid in ranks), scaled(10), "the ranks to die")
    finally:
        os.kill(supervisor, signal.SIGCONT)
    done = ended(client, job)
    assert (done["status"], done["error_code"]) == ("failed", "child_killed")
