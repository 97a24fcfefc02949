"""The deployment itself: the repository's Dockerfile and compose files, built and run.

An engine of the test's own (tests/compose/engine.py) builds the api and CPU worker images
from the Dockerfile (changed only through build arguments) and runs `docker-compose up` with
docker-compose.yml and docker-compose.cpu.yml. Against that stack, in order: a key made in the
api container, a PyTorch and a TensorFlow job submitted with the CLI from the host, a worker
restarted and one stopped mid-job, `down` and `up` keeping everything, `down -v` leaving
nothing. Minutes long: `make test-compose` runs it (root, apt and PyPI reachable); the default
run leaves it out (marker `compose`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.compose.engine import Engine
from tests.compose.stack import Stack, running
from tests.helpers import wait_until

pytestmark = [pytest.mark.compose, pytest.mark.timeout(3600)]
DIGITS: dict[str, Any] = {
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [32]},
    "training": {"epochs": 3, "batch_size": 64},
}
# Long enough to be caught mid-run, a checkpoint after every epoch.
RESUMABLE: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 2000, "features": 16},
    "model": {"hidden_units": [32]},
    "training": {"epochs": 40, "batch_size": 16},
    "checkpoint_every_epochs": 1,
}
WORKER = "worker-cpu"
ENDED = {"succeeded", "failed", "cancelled"}
ROWS = np.random.default_rng(5).integers(0, 17, (5, 8, 8))  # digits: 8x8 images
FOUND: dict[str, str] = {}  # what the earlier steps made, for the later ones to find again


@pytest.fixture(scope="module")
def stack(engine: Engine) -> Iterator[Stack]:
    with running(Stack.create(engine)) as stack:
        yield stack


def submit(stack: Stack, tmp_path: Path, name: str, spec: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **spec}))
    job_id = stack.cli("submit", str(path)).split()[-1]
    FOUND[name] = job_id
    return job_id


def wait_status(stack: Stack, job_id: str, statuses: set[str], timeout: float) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job: dict[str, Any] = stack.get(f"/v1/jobs/{job_id}")
        return job if job["status"] in statuses else None

    found: dict[str, Any] = wait_until(reached, timeout, f"{job_id} to reach {statuses}", 1.0)
    return found


def rows(stack: Stack, job_id: str) -> list[tuple[int, int]]:
    """(epoch, attempt) of each metrics row in PostgreSQL."""
    query = f"SELECT epoch, attempt FROM epoch_metric WHERE job_id = '{job_id}' ORDER BY epoch"
    return [(int(e), int(a)) for e, a in stack.sql(query)]


def predict(stack: Stack, job_id: str, tmp_path: Path) -> list[int]:
    np.save(tmp_path / "rows.npy", ROWS)
    answer = json.loads(stack.cli("predict", job_id, str(tmp_path / "rows.npy"), "--json"))
    predictions: list[int] = answer["predictions"]
    return predictions


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_a_job_of_each_framework_trains_and_predicts(
    stack: Stack, tmp_path: Path, framework: str
) -> None:
    job_id = submit(stack, tmp_path, f"digits-{framework}", {"framework": framework, **DIGITS})
    done = wait_status(stack, job_id, ENDED, 900)
    assert done["status"] == "succeeded", done.get("error")
    assert rows(stack, job_id) == [(1, 1), (2, 1), (3, 1)]
    predictions = predict(stack, job_id, tmp_path)
    assert len(predictions) == len(ROWS) and all(0 <= p < 10 for p in predictions)


def test_everything_under_data_belongs_to_the_services_user(stack: Stack) -> None:
    """uid 10001 (the Dockerfile's `epochal`) owns the volume the api and the worker share,
    and everything the jobs wrote in it."""
    for service in ("api", WORKER):
        assert stack.compose("exec", "-T", service, "id", "-u", quiet=True).strip() == "10001"
    foreign = stack.compose("exec", "-T", WORKER, "find", "/data", "!", "-user", "10001")
    assert foreign.strip() == ""
    assert stack.compose("exec", "-T", WORKER, "ls", "/data/artifacts", quiet=True).split()


def wait_epochs(stack: Stack, job_id: str, count: int) -> None:
    wait_until(lambda: len(rows(stack, job_id)) >= count, 600, f"{count} epochs of {job_id}", 1.0)


def assert_resumed(stack: Stack, job_id: str) -> None:
    """Succeeded on a second attempt, with rows 1…N once each: the first attempt's up to the
    epoch it stopped after, the second's after that."""
    done = wait_status(stack, job_id, ENDED, 900)
    assert (done["status"], done["attempt"]) == ("succeeded", 2), done.get("error")
    stored = rows(stack, job_id)
    epochs = RESUMABLE["training"]["epochs"]
    assert [epoch for epoch, _ in stored] == list(range(1, epochs + 1))
    stopped = max(epoch for epoch, attempt in stored if attempt == 1)
    assert stored == [(e, 1 if e <= stopped else 2) for e in range(1, epochs + 1)]


def test_a_restarted_worker_resumes_its_job(stack: Stack, tmp_path: Path) -> None:
    job_id = submit(stack, tmp_path, "restarted", RESUMABLE)
    wait_epochs(stack, job_id, 2)
    stack.compose("restart", WORKER)
    assert_resumed(stack, job_id)


def test_a_stopped_worker_requeues_its_job_at_a_step(stack: Stack, tmp_path: Path) -> None:
    """SIGTERM (`stop`): the job stops at a step and waits queued, within stop_grace_period
    (the container exits by itself, not by the SIGKILL that ends the grace period)."""
    job_id = submit(stack, tmp_path, "stopped", RESUMABLE)
    wait_epochs(stack, job_id, 2)
    stack.compose("stop", WORKER)
    state = stack.inspect(WORKER)
    assert state["Status"] == "exited" and state["ExitCode"] != 137, state
    job = stack.get(f"/v1/jobs/{job_id}")
    assert job["status"] == "queued", job
    requeued = [t for t in job["transitions"] if t["to_status"] == "queued" and t["attempt"]]
    assert len(requeued) == 1 and "worker shutting down" in requeued[0]["reason"], requeued
    stack.compose("start", WORKER)
    assert_resumed(stack, job_id)


def test_down_and_up_keep_jobs_keys_metrics_and_models(stack: Stack, tmp_path: Path) -> None:
    before = {job["id"]: job["status"] for job in stack.get("/v1/jobs?limit=100")["items"]}
    assert set(FOUND.values()) <= set(before)
    stack.compose("down")
    stack.up()  # the same key: it lives in PostgreSQL's volume
    after = {job["id"]: job["status"] for job in stack.get("/v1/jobs?limit=100")["items"]}
    assert after == before
    job_id = FOUND["digits-pytorch"]
    assert rows(stack, job_id) == [(1, 1), (2, 1), (3, 1)]
    assert len(predict(stack, job_id, tmp_path)) == len(ROWS)  # the model, from the volume


def test_down_v_leaves_nothing_running_or_mounted(stack: Stack) -> None:
    stack.compose("down", "-v")
    assert stack.leftovers() == []
