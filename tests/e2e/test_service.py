"""End to end with real processes: uvicorn API, Celery worker, training child, real broker and
database — on the embedded default (SQLite + filesystem broker) and on PostgreSQL + Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.config import Settings
from app.schemas.job_spec import JobSpec
from tests.e2e.procs import training_children, training_processes_of
from tests.helpers import Service, running_service, wait_for_status, wait_until
from worker.supervisor.threads import cpu_budget, spare_cpu, threads_for, usable_cpus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def service(service_env: dict[str, str]) -> Iterator[Service]:
    with running_service(service_env) as svc:
        yield svc


@pytest.fixture
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as c:
        yield c


def submit(client: httpx.Client, **spec: Any) -> dict[str, Any]:
    body = {"dataset": {"name": "digits"}, **spec}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def epochs_of(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    return client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_digits_job_trains_for_real(client: httpx.Client, framework: str) -> None:
    job = submit(
        client,
        framework=framework,
        training={"epochs": 8, "batch_size": 32},
        model={"hidden_units": [128, 64]},
        regularization={"l2": 0.0001},
    )
    done = wait_for_status(client, job["id"], {"succeeded", "failed"})
    assert done["status"] == "succeeded", done["error"]
    assert done["stop_reason"] == "completed" and done["attempt"] == 1
    assert done["result"]["val_accuracy"] >= 0.90
    rows = epochs_of(client, job["id"])
    assert [r["epoch"] for r in rows] == list(range(1, 9))  # exactly one row per epoch
    assert all(r["learning_rate"] == 0.001 and r["samples_per_second"] > 0 for r in rows)
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    statuses = [t["to_status"] for t in done["transitions"]]
    assert statuses == ["queued", "running", "succeeded"]
    check_result(done["result"])


TIMINGS = {"startup_s", "data_s", "build_s", "fit_s", "checkpoint_s", "db_write_s",
           "final_eval_s", "export_s"}  # fmt: skip


def check_result(result: dict[str, Any]) -> None:
    """The succeeded job's result beyond its metrics: the model, the epochs, where time went."""
    widths = [64, 128, 64, 10]  # digits are 8x8 images of 10 classes
    assert result["parameters"] == sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    assert result["evaluated_on"] == "val" and result["training_seconds"] > 0
    assert result["stopped_epoch"] == 8 and 1 <= result["best_epoch"] <= 8
    assert (result["replicas"], result["strategy"]) == (1, "single")
    timings = result["timings"]
    assert set(timings) == TIMINGS and all(v >= 0 for v in timings.values())
    assert timings["fit_s"] > 0 and timings["db_write_s"] > 0 and timings["checkpoint_s"] > 0
    assert timings["fit_s"] >= timings["checkpoint_s"] + timings["db_write_s"]
    assert timings["fit_s"] == pytest.approx(result["training_seconds"], abs=2e-3)


def keras_stop_epoch(values: list[float], patience: int, min_delta: float) -> int:
    """Where keras.callbacks.EarlyStopping would have stopped on this sequence."""
    import keras

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    callback = keras.callbacks.EarlyStopping(
        monitor="val_loss", patience=patience, min_delta=min_delta
    )
    callback.set_model(model)
    model.stop_training = False
    callback.on_train_begin()
    for epoch, value in enumerate(values):
        callback.on_epoch_end(epoch, {"val_loss": value})
        if model.stop_training:
            return epoch + 1
    return len(values)


def test_early_stopping_stops_where_keras_says(client: httpx.Client) -> None:
    job = submit(
        client,
        framework="pytorch",
        training={"epochs": 30},
        early_stopping={"monitor": "val_loss", "patience": 1, "min_delta": 0.02},
    )
    done = wait_for_status(client, job["id"], {"succeeded", "failed"})
    rows = epochs_of(client, job["id"])
    assert done["status"] == "succeeded" and done["stop_reason"] == "early_stopping"
    assert len(rows) < 30
    assert len(rows) == keras_stop_epoch([r["val_loss"] for r in rows], patience=1, min_delta=0.02)


def test_cancel_running_job_keeps_finished_epochs(client: httpx.Client) -> None:
    job = submit(
        client,
        framework="pytorch",
        # 250 steps an epoch: the cancel is taken at the next epoch boundary, so a short
        # epoch keeps the wait short; 1,000 of them cannot finish first.
        dataset={"name": "synthetic", "samples": 4000},
        training={"epochs": 1000, "batch_size": 16},
    )
    wait_until(lambda: len(epochs_of(client, job["id"])) >= 1, 120, "the first epoch")
    response = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 200 and response.json()["status"] in ("cancelling", "cancelled")
    done = wait_for_status(client, job["id"], {"cancelled", "failed", "succeeded"}, timeout=60)
    assert done["status"] == "cancelled" and done["stop_reason"] == "cancelled"
    rows = epochs_of(client, job["id"])
    assert 1 <= len(rows) < 1000 and [r["epoch"] for r in rows] == list(range(1, len(rows) + 1))
    assert "cancelling" in [t["to_status"] for t in done["transitions"]]


def test_a_running_jobs_steps_advance_within_its_first_epoch(client: httpx.Client) -> None:
    job = submit(
        client,
        framework="pytorch",
        # 90,000 steps an epoch: the first lasts for many of the child's reports (a second or
        # so apart); the cancel is taken at a step, so the job ends at once all the same.
        dataset={"name": "synthetic", "samples": 200_000},
        training={"epochs": 2, "batch_size": 2},
    )
    seen: list[dict[str, int]] = []

    def two_reports_in_epoch_one() -> bool:
        now = client.get(f"/v1/jobs/{job['id']}").json()
        progress = now["step_progress"]
        if now["current_epoch"] == 0 and progress is not None:
            assert progress["epoch"] == 1 and 0 < progress["step"] < progress["steps"]
            seen.append(progress)
        return len({p["step"] for p in seen}) >= 2

    wait_until(two_reports_in_epoch_one, 120, "two step reports within the first epoch")
    steps = [p["step"] for p in seen]
    assert steps == sorted(steps) and len({p["steps"] for p in seen}) == 1
    client.post(f"/v1/jobs/{job['id']}/cancel")
    done = wait_for_status(client, job["id"], {"cancelled", "failed", "succeeded"}, timeout=60)
    assert done["status"] == "cancelled" and done["current_epoch"] == 0
    assert done["step_progress"] is None  # an ended job has no epoch in progress


def test_the_next_child_imports_its_framework_while_a_job_trains(
    service: Service, client: httpx.Client
) -> None:
    if "EPOCHAL_DATABASE_URL" in service.env:
        pytest.skip("the process model does not depend on the database: runs on sqlite only")
    home = Path(service.env["EPOCHAL_HOME"])
    long_job = {"dataset": {"name": "synthetic", "samples": 4000}, "training": {"epochs": 1000}}
    # The import starts beside a job only where the job leaves a CPU free (threads.spare_cpu):
    # not on one test's own run, whose job trains on every core, nor under a quota of one CPU
    # (tests/slow_machine.sh). There it waits for the job's end (tests/worker/test_threads.py).
    budget = {**os.environ, **service.env}.get("EPOCHAL_WORKER_CPUS")
    job = JobSpec.model_validate({"framework": "pytorch", **long_job})
    threads = threads_for(job, cpu_budget(Settings(worker_cpus=int(budget) if budget else None)))
    if not spare_cpu(job, threads):
        pytest.skip(f"the job's {threads.intra} CPU(s) of {usable_cpus()} leave none spare")
    first = submit(client, framework="pytorch", **long_job)["id"]
    wait_until(lambda: len(epochs_of(client, first)) >= 1, 120, "the first epoch")

    def waiting() -> list[int]:
        return [p for p in training_processes_of(home) if p not in training_children(first)]

    # Started when the job's child was, not when it ends: the next job need not wait for it.
    (warm,) = wait_until(waiting, 30, "a warm child beside the running job")
    client.post(f"/v1/jobs/{first}/cancel")
    wait_for_status(client, first, {"cancelled"}, timeout=60)
    second = submit(client, framework="pytorch", **long_job)["id"]
    wait_until(lambda: len(epochs_of(client, second)) >= 1, 120, "the second job's first epoch")
    assert training_children(second) == [warm]
    client.post(f"/v1/jobs/{second}/cancel")
    wait_for_status(client, second, {"cancelled"}, timeout=60)


def test_queued_job_cancelled_while_no_worker_runs_never_runs(
    service: Service, client: httpx.Client
) -> None:
    service.stop("worker")
    job = submit(client, framework="pytorch", training={"epochs": 1})
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    service.start_worker("worker")
    follow = submit(client, framework="pytorch", training={"epochs": 1})
    assert wait_for_status(client, follow["id"], {"succeeded"})["status"] == "succeeded"
    cancelled = client.get(f"/v1/jobs/{job['id']}").json()
    assert cancelled["status"] == "cancelled" and cancelled["attempt"] == 0
    assert epochs_of(client, job["id"]) == []
