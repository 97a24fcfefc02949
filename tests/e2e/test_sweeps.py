"""Sweeps on real workers with real Optuna, embedded and on PostgreSQL + Redis: a median
pruner stops the clearly bad trials at min_epochs in both frameworks, and a fixed sampler seed
on one worker draws the same trials twice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import Service, running_service, wait_until

pytestmark = pytest.mark.e2e
GOOD, BAD = 0.01, 1e-5  # adam on digits: ~0.9 val accuracy after one epoch, against ~0.2


@pytest.fixture(scope="module")
def service(service_env: dict[str, str]) -> Iterator[Service]:
    with running_service(service_env) as svc:
        yield svc


@pytest.fixture
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as c:
        yield c


def submit_sweep(client: httpx.Client, body: dict[str, Any]) -> str:
    response = client.post("/v1/sweeps", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def wait_for_sweep(client: httpx.Client, sweep_id: str, timeout: float = 300) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        sweep = client.get(f"/v1/sweeps/{sweep_id}").json()
        return sweep if sweep["finished_at"] else None

    return dict(wait_until(ended, timeout, f"sweep {sweep_id} to end", interval=0.5))


def pruning_sweep(framework: str) -> dict[str, Any]:
    """One good rate and two bad ones, one trial at a time; seed 1 draws the good one first."""
    return {
        "name": f"prune-{framework}",
        "base": {
            "framework": framework,
            "dataset": {"name": "digits"},
            "model": {"hidden_units": [32]},
            "training": {"epochs": 5, "batch_size": 32},
        },
        "parameters": {
            "optimizer.learning_rate": {"type": "categorical", "choices": [GOOD, BAD, 2 * BAD]}
        },
        "objective": {"metric": "val_accuracy", "mode": "max"},
        "sampler": {"name": "grid", "seed": 1},
        "pruner": {"name": "median", "params": {"n_startup_trials": 1}, "min_epochs": 2},
        "max_trials": 3,
        "max_parallel": 1,
    }


def only_on_postgres(service: Service) -> None:
    """What does not depend on the database runs once, on the production-like one."""
    if "EPOCHAL_DATABASE_URL" not in service.env:
        pytest.skip("runs on postgres only (the suite's time budget)")


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_median_pruner_stops_bad_trials_at_min_epochs(
    service: Service, client: httpx.Client, framework: str
) -> None:
    if framework == "tensorflow":
        only_on_postgres(service)
    sweep = wait_for_sweep(client, submit_sweep(client, pruning_sweep(framework)))
    assert sweep["status"] == "succeeded", sweep
    trials = sweep["trials"]
    rates = [t["params"]["optimizer.learning_rate"] for t in trials]
    assert rates[0] == GOOD and sorted(rates[1:]) == [BAD, 2 * BAD]
    assert [t["state"] for t in trials] == ["complete", "pruned", "pruned"]
    assert [t["epochs_run"] for t in trials] == [5, 2, 2]
    assert sweep["epochs_spent"] == 9 and sweep["epochs_full"] == 15
    assert sweep["best"]["job_id"] == trials[0]["job_id"] and sweep["best"]["objective"] > 0.8
    for trial in trials[1:]:  # an ordinary job that ended early: succeeded, stop_reason pruned
        job = client.get(f"/v1/jobs/{trial['job_id']}").json()
        assert (job["status"], job["stop_reason"]) == ("succeeded", "pruned")
        assert len(client.get(f"/v1/jobs/{trial['job_id']}/metrics").json()["items"]) == 2
        assert job["result"]["stopped_epoch"] == 2 and job["sweep_id"] == sweep["id"]
    jobs = client.get("/v1/jobs", params={"sweep_id": sweep["id"]}).json()["items"]
    assert sorted(j["id"] for j in jobs) == sorted(t["job_id"] for t in trials)


def test_a_fixed_seed_on_one_worker_draws_the_same_trials(
    service: Service, client: httpx.Client
) -> None:
    only_on_postgres(service)
    body = {
        "name": "seeded",
        "base": {
            "framework": "pytorch",
            "dataset": {"name": "digits", "limit": 600},
            "model": {"hidden_units": [16]},
            "training": {"epochs": 2, "batch_size": 64},
        },
        "parameters": {
            "optimizer.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
            "model.hidden_units": {"type": "categorical", "choices": [[16], [32], [16, 16]]},
            "regularization.l2": {"type": "uniform", "low": 0.0, "high": 1e-3},
        },
        "objective": {"metric": "val_loss"},
        "sampler": {"name": "tpe", "seed": 11, "n_startup_trials": 1},  # the second is TPE's
        "pruner": {"name": "none"},
        "max_trials": 2,
        "max_parallel": 1,
    }
    first = wait_for_sweep(client, submit_sweep(client, body))
    second = wait_for_sweep(client, submit_sweep(client, body))
    assert first["status"] == second["status"] == "succeeded"
    assert [t["params"] for t in first["trials"]] == [t["params"] for t in second["trials"]]
    assert len({str(t["params"]) for t in first["trials"]}) == 2  # two different draws
