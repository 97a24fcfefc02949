"""A sweep through faults, on PostgreSQL + Redis with real processes: the API and the worker
SIGKILLed mid-trial (the trial resumes as any job does; no trial doubled or lost; its pruning
history intact), and trials whose training process is killed (each failure counts against
max_failed_trials; the sweep goes on until one more than allowed)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.procs import alive, training_children
from tests.e2e.test_recovery import SETTINGS, kill_worker_group
from tests.helpers import Service, clear_caches, running_service, wait_until

pytestmark = pytest.mark.e2e
EPOCHS = 10
BASE: dict[str, Any] = {  # ~0.1 s an epoch on a fast core (188 steps): killed at epoch 2 of 10
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 3000, "features": 32},
    "model": {"hidden_units": [64]},
    "training": {"epochs": EPOCHS, "batch_size": 16},
}


@pytest.fixture(scope="module")
def service(pg_service_env: dict[str, str]) -> Iterator[Service]:
    with running_service(pg_service_env, **SETTINGS) as svc:
        yield svc


def sweep_body(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "faults",
        "base": BASE,
        "parameters": {
            "optimizer.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 1e-2}
        },
        "objective": {"metric": "val_loss"},
        "sampler": {"name": "random", "seed": 5},
        # Reports every epoch to Optuna, never prunes (10 complete trials needed first).
        "pruner": {"name": "median", "params": {"n_startup_trials": 10}},
        "max_trials": 2,
        "max_parallel": 1,
        **overrides,
    }


def current_trial(http: httpx.Client, sweep_id: str, number: int) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        trials = http.get(f"/v1/sweeps/{sweep_id}").json()["trials"]
        return next((t for t in trials if t["number"] == number), None)

    return dict(wait_until(found, 60, f"trial {number} of sweep {sweep_id}"))


def epochs_done(http: httpx.Client, job_id: str) -> int:
    return len(http.get(f"/v1/jobs/{job_id}/metrics").json()["items"])


def study(service: Service, sweep_id: str) -> Any:
    import optuna

    storage = optuna.storages.RDBStorage(
        service.env["EPOCHAL_DATABASE_URL"], skip_compatibility_check=True, skip_table_creation=True
    )
    return optuna.load_study(study_name=f"sweep-{sweep_id}", storage=storage)


def wait_for_end(http: httpx.Client, sweep_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        sweep = http.get(f"/v1/sweeps/{sweep_id}").json()
        return sweep if sweep["finished_at"] else None

    return dict(wait_until(ended, 300, f"sweep {sweep_id} to end", interval=0.5))


def test_api_and_worker_killed_mid_trial_the_trial_resumes_none_doubled(
    service: Service,
) -> None:
    with service.client() as http:
        response = http.post("/v1/sweeps", json=sweep_body())
        assert response.status_code == 201, response.text
        sweep_id = response.json()["id"]
        job_id = current_trial(http, sweep_id, 0)["job_id"]
        wait_until(lambda: epochs_done(http, job_id) >= 2, 120, "trial 0's second epoch")
    service.stop("api", sig=signal.SIGKILL)
    children, _ = kill_worker_group(service, job_id)
    wait_until(lambda: not any(alive(p) for p in children), 10, "the orphan to die")
    service.start_worker("worker")
    service.start_api()
    with service.client() as http:
        sweep = wait_for_end(http, sweep_id)
        assert sweep["status"] == "succeeded", sweep
        assert [t["number"] for t in sweep["trials"]] == [0, 1]
        assert [t["state"] for t in sweep["trials"]] == ["complete", "complete"]
        jobs = http.get("/v1/jobs", params={"sweep_id": sweep_id}).json()["items"]
        assert sorted(j["id"] for j in jobs) == sorted(t["job_id"] for t in sweep["trials"])
        resumed = http.get(f"/v1/jobs/{job_id}").json()
        assert resumed["attempt"] == 2 and resumed["current_epoch"] == EPOCHS
    clear_caches()
    trials = study(service, sweep_id).get_trials()
    assert [t.number for t in trials] == [0, 1]  # Optuna handed out no extra trial
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert sorted(trials[0].intermediate_values) == list(range(1, EPOCHS + 1))  # history intact
    assert trials[0].value == pytest.approx(sweep["trials"][0]["objective"])


def kill_training(job_id: str) -> None:
    pids = wait_until(lambda: training_children(job_id), 60, f"job {job_id}'s training child")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def test_failed_trials_count_against_max_failed_trials(service: Service) -> None:
    body = sweep_body(
        base={**BASE, "max_restarts": 0}, max_trials=3, max_failed_trials=1, name="failing"
    )
    with service.client() as http:
        sweep_id = http.post("/v1/sweeps", json=body).json()["id"]
        first = current_trial(http, sweep_id, 0)["job_id"]
        wait_until(lambda: epochs_done(http, first) >= 1, 120, "trial 0's first epoch")
        kill_training(first)
        # One failure is allowed: the sweep goes on with the next trial.
        second = current_trial(http, sweep_id, 1)["job_id"]
        job = http.get(f"/v1/jobs/{first}").json()
        assert (job["status"], job["error_code"]) == ("failed", "child_killed")
        assert http.get(f"/v1/sweeps/{sweep_id}").json()["status"] == "running"
        wait_until(lambda: epochs_done(http, second) >= 1, 120, "trial 1's first epoch")
        kill_training(second)
        sweep = wait_for_end(http, sweep_id)
    assert sweep["status"] == "failed" and sweep["trials_launched"] == 2
    assert [t["state"] for t in sweep["trials"]] == ["failed", "failed"]
    clear_caches()
    assert [t.state.name for t in study(service, sweep_id).get_trials()] == ["FAIL", "FAIL"]
