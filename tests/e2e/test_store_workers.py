"""Workers on boxes of their own, sharing no folder: PostgreSQL, Redis and SeaweedFS (S3) between
them, each worker with its own EPOCHAL_HOME, the API with a third. A job's checkpoints and model
reach the API and the next worker through the store alone."""

from __future__ import annotations

import io
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.storage.checkpoint_sets import MANIFEST, CheckpointSets
from app.storage.s3 import S3Store
from tests.e2e.procs import alive, training_children
from tests.helpers import Service, metric_attempts, running_service, wait_for_status, wait_until
from tests.storage_server import CREDENTIALS, SeaweedServer, s3_store

pytestmark = pytest.mark.e2e

SETTINGS = {
    "EPOCHAL_HEARTBEAT_SECONDS": "1",
    "EPOCHAL_LEASE_SECONDS": "3",
    "EPOCHAL_MAINTENANCE_SECONDS": "1",
    "EPOCHAL_DISPATCH_RETRY_SECONDS": "3",
}
EPOCHS = 16  # a few tenths of a second an epoch: room to kill after epoch 2, short to finish
JOB: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 4000, "features": 32},
    "model": {"hidden_units": [64]},
    "training": {"epochs": EPOCHS, "batch_size": 16},
}


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"e2e-{secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def service(
    pg_service_env: dict[str, str],
    seaweed: SeaweedServer,
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    """The API (no worker yet) on an S3 store: EPOCHAL_STORE_URL and the AWS variables."""
    store = seaweed.store_env(prefix, tmp_path_factory.mktemp("aws"))
    with running_service({**pg_service_env, **store}, worker=False, **SETTINGS) as svc:
        yield svc


@pytest.fixture
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as c:
        yield c


@pytest.fixture
def store(seaweed: SeaweedServer, prefix: str, monkeypatch: pytest.MonkeyPatch) -> S3Store:
    """The test's own view of the service's store."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return s3_store(seaweed, prefix)


def start_worker(service: Service, name: str, tmp_path: Path) -> Path:
    """A worker with a home of its own (its artifacts directory too); that home."""
    home = tmp_path / f"{name}-home"
    service.start_worker(name, {"EPOCHAL_HOME": str(home)})
    return home


def latest_epoch(store: S3Store, job_id: str) -> int:
    latest = CheckpointSets(store, f"{job_id}/checkpoints").latest()
    return latest.epoch if latest else 0


def assert_sets_whole(store: S3Store, job_id: str) -> None:
    """Every checkpoint prefix of the job has its manifest, and every part its checksum."""
    sets = CheckpointSets(store, f"{job_id}/checkpoints")
    assert sets.names() and all(sets.load(name) is not None for name in sets.names())
    keys = [info.key for info in store.list_objects(f"{job_id}/checkpoints/")]
    assert all(f"{sets.root}{name}/{MANIFEST}" in keys for name in sets.names())
    assert not store.list_uploads(f"{job_id}/")


def test_a_job_trained_through_the_store_is_downloaded_from_it(
    service: Service, client: httpx.Client, store: S3Store, tmp_path: Path
) -> None:
    home = start_worker(service, "worker-a", tmp_path)
    try:
        response = client.post("/v1/jobs", json={**JOB, "training": {"epochs": 3}})
        job_id = response.json()["id"]
        done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 120)
        assert done["status"] == "succeeded", done["error"]
    finally:
        service.stop("worker-a")
    model = client.get(f"/v1/jobs/{job_id}/artifacts/model")
    assert model.status_code == 200, model.text
    assert model.content == store.get(f"{job_id}/model/model.pt")
    assert model.content == (home / "artifacts" / job_id / "model" / "model.pt").read_bytes()
    api_home = Path(service.env["EPOCHAL_HOME"])
    assert not (api_home / "artifacts" / job_id / "model").exists()  # the API had only the store
    onnx = client.get(f"/v1/jobs/{job_id}/artifacts/onnx")
    assert onnx.status_code == 200 and onnx.content == store.get(f"{job_id}/model/model.onnx")
    card = client.get(f"/v1/jobs/{job_id}/artifacts/model-card")
    assert card.status_code == 200 and card.json()["input"]["shape"][1:] == [32]
    listed = client.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]
    checkpoint = next(item for item in listed if item["kind"] == "checkpoint")
    assert checkpoint["epoch"] == 3 and checkpoint["size_bytes"] > 0  # the store's newest set
    predicted = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": [[0.5] * 32]})
    assert predicted.status_code == 200, predicted.text  # model.onnx fetched from the store
    assert latest_epoch(store, job_id) == 3
    assert_sets_whole(store, job_id)
    # The job's log, from the database: the API's box has no file of it.
    assert not (api_home / "artifacts" / job_id / "job.log").exists()
    written = (home / "artifacts" / job_id / "job.log").read_text().splitlines()
    logs = client.get(f"/v1/jobs/{job_id}/logs", params={"tail": 1000}).json()["lines"]
    assert written and len(logs) == len(written), (logs, written)


def test_a_killed_workers_job_resumes_on_another_box_from_the_store(
    service: Service, client: httpx.Client, store: S3Store, tmp_path: Path
) -> None:
    start_worker(service, "worker-a", tmp_path)
    job_id = client.post("/v1/jobs", json=JOB).json()["id"]
    wait_until(lambda: latest_epoch(store, job_id) >= 2, 180, "epoch 2's checkpoint in the store")
    children = wait_until(lambda: training_children(job_id), 30, "the training child")
    service.stop("worker-a", sig=signal.SIGKILL)  # the box is gone, its disk with it
    wait_until(lambda: not any(alive(p) for p in children), 10, "the orphan to die")
    home_b = start_worker(service, "worker-b", tmp_path)  # shares nothing with worker-a's home
    try:
        done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 240)
    finally:
        service.stop("worker-b")
    assert done["status"] == "succeeded", done["error"]
    assert done["attempt"] == 2 and done["stop_reason"] == "completed"
    rows = metric_attempts(service, job_id)
    assert [epoch for epoch, _ in rows] == list(range(1, EPOCHS + 1))  # one row per epoch
    kept = [epoch for epoch, attempt in rows if attempt == 1]
    # Resumed from the store's set (epoch 2 or later), not from scratch: the rows up to it
    # were kept, every later one written again by attempt 2.
    assert kept == list(range(1, len(kept) + 1)) and len(kept) >= 2
    assert all(attempt == 2 for epoch, attempt in rows if epoch > len(kept))
    log = (home_b / "artifacts" / job_id / "job.log").read_text()
    assert f"took the checkpoint of epoch {len(kept)} from the store" in log
    assert client.get(f"/v1/jobs/{job_id}/artifacts/model").status_code == 200
    assert latest_epoch(store, job_id) == EPOCHS
    assert_sets_whole(store, job_id)  # what the kill left mid-upload is gone


def test_an_uploaded_data_set_reaches_a_worker_through_the_store(
    service: Service, client: httpx.Client, store: S3Store, tmp_path: Path
) -> None:
    """POST /v1/datasets on the API's box; a worker with a home of its own trains on it, from
    the store's copy; deleting the data set deletes that copy."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 12)).astype(np.float32)
    buffer = io.BytesIO()
    np.savez(buffer, x=x, y=(x[:, 0] > 0).astype(np.int64))
    answer = client.post("/v1/datasets", files={"file": ("rows.npz", buffer.getvalue())})
    assert answer.status_code == 201, answer.text
    dataset_id = answer.json()["id"]
    assert store.head(f"datasets/{dataset_id}/upload.npz").size > 0
    home = start_worker(service, "worker-c", tmp_path)
    try:
        spec = {**JOB, "dataset": {"id": dataset_id}, "training": {"epochs": 2}}
        job_id = client.post("/v1/jobs", json=spec).json()["id"]
        done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 120)
    finally:
        service.stop("worker-c")
    assert done["status"] == "succeeded", done["error"]
    assert (home / "data" / "uploads" / f"{dataset_id}.npz").is_file()  # fetched there
    assert client.delete(f"/v1/datasets/{dataset_id}").status_code == 204
    assert not list(store.list_objects(f"datasets/{dataset_id}/"))
