"""Admission by cost at submit, in-process against the real databases: the 422 names the fields
and both numbers; the limit is the setting or the largest live worker's advertised memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.db import session_scope
from app.domain.tables import Worker
from tests.app.domain.test_cost import REPRO
from tests.conftest import make_key
from tests.helpers import ROOT
from worker.supervisor.heartbeat import beat

GB = 10**9


@pytest.fixture
def client(db_env: dict[str, str], api_key: str) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {api_key}"
        yield test_client


def advertise(name: str, memory: int, disk: int | None = None, gpus: int = 0) -> None:
    """A live worker row as the heartbeat writes it, with the capacity it reports set."""
    beat(name, [{"id": str(g), "name": None, "memory_mb": None} for g in range(gpus)])
    with session_scope() as session:
        values = {"memory_bytes": memory, "disk_free_bytes": disk}
        session.execute(update(Worker).where(Worker.name == name).values(**values))


def test_the_reproduction_is_refused_naming_fields_and_numbers(client: TestClient) -> None:
    advertise("box", 16 * GB)
    response = client.post("/v1/jobs", json=REPRO)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["dataset.samples", "dataset.features"]
    assert "118.5 GB" in errors[0]["msg"] and str(16 * GB) in errors[0]["msg"]
    assert "largest live worker" in errors[0]["msg"]
    assert client.get("/v1/jobs").json()["items"] == []  # nothing was stored


def test_the_heartbeat_reports_memory_and_disk(client: TestClient) -> None:
    beat("real", [])
    admin = {"Authorization": f"Bearer {make_key('root', admin=True)}"}  # the detail's reader
    worker = client.get("/v1/workers", headers=admin).json()["items"][0]
    assert worker["memory_bytes"] > 2**28 and worker["disk_free_bytes"] > 0


def test_without_workers_this_machines_memory_bounds_it(client: TestClient) -> None:
    response = client.post("/v1/jobs", json=REPRO)
    assert response.status_code == 422 and "this machine's memory" in response.text


def test_the_setting_bounds_below_the_workers(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.core.config import get_settings

    advertise("big", 64 * GB)
    body = {"framework": "pytorch", "dataset": {"name": "mnist"}}
    assert client.post("/v1/jobs", json=body).status_code == 201
    monkeypatch.setenv("EPOCHAL_MAX_JOB_MEMORY_BYTES", str(100 * 2**20))
    get_settings.cache_clear()
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert "EPOCHAL_MAX_JOB_MEMORY_BYTES" in response.json()["errors"][0]["msg"]
    assert response.json()["errors"][0]["field"] == "dataset.name"


def test_only_workers_that_could_take_the_job_count(client: TestClient) -> None:
    advertise("cpu", 64 * GB)
    advertise("gpu", 1 * GB, gpus=1)  # a GPU box takes CPU jobs too; the CPU box no GPU job
    body = {"framework": "pytorch", "dataset": {"name": "mnist"}, "model": {"type": "cnn"}}
    big_batch = {**body, "training": {"batch_size": 65536}}
    assert client.post("/v1/jobs", json=big_batch).status_code == 201
    gpu_job = {**big_batch, "resources": {"gpus": 1}}
    assert client.post("/v1/jobs", json=gpu_job).status_code == 422  # only the 1 GB box


def test_disk_beyond_the_largest_workers_free_space_is_refused(client: TestClient) -> None:
    advertise("tight", 64 * GB, disk=10**6)
    body = {"framework": "pytorch", "dataset": {"name": "mnist"}, "model": {"hidden_units": [512]}}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert "of disk" in response.json()["errors"][0]["msg"]


def test_a_sweep_whose_base_does_not_fit_is_refused(client: TestClient) -> None:
    advertise("box", 16 * GB)
    sweep = {
        "base": REPRO,
        "parameters": {"optimizer.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 0.1}},
        "objective": {"metric": "val_loss"},
        "max_trials": 2,
    }
    response = client.post("/v1/sweeps", json=sweep)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "base.dataset.samples"


def test_a_sweep_whose_largest_batch_does_not_fit_names_that_parameter(
    client: TestClient,
) -> None:
    advertise("box", 1 * GB)
    base = {"framework": "pytorch", "dataset": {"name": "mnist"}, "model": {"type": "cnn"}}
    sweep = {
        "base": base,
        "parameters": {"training.batch_size": {"type": "int", "low": 16, "high": 65536}},
        "objective": {"metric": "val_loss"},
        "max_trials": 2,
    }
    response = client.post("/v1/sweeps", json=sweep)
    assert response.status_code == 422, response.text
    error = response.json()["errors"][0]
    assert error["field"] == "parameters.training.batch_size" and "65536" in error["msg"]


def test_an_upload_is_costed_from_its_row(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from app.core.config import get_settings
    from tests.app.api.test_datasets import npz, upload

    x = np.zeros((5000, 28, 28), np.uint8)  # 3.9 MB stored, ~20 MB once loaded as float32
    dataset_id = upload(client, npz(x=x, y=np.arange(5000) % 10)).json()["id"]
    body = {"framework": "pytorch", "dataset": {"id": dataset_id}}
    assert client.post("/v1/jobs", json=body).status_code == 201
    monkeypatch.setenv("EPOCHAL_MAX_JOB_MEMORY_BYTES", str(2**20))  # below the runtime alone
    get_settings.cache_clear()
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "dataset.id"


def test_a_submit_builds_its_model_once(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The validator, the data-set check, admission, the disk reservation and the stored
    # summary all take the one build: counted around the real build, which still runs.
    import numpy as np
    import yaml

    from app.schemas import spec_graph
    from tests.app.api.test_datasets import npz, upload

    builds: list[int] = []
    real = spec_graph.build

    def counted(*args: Any, **kwargs: Any) -> Any:
        builds.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(spec_graph, "build", counted)
    residual = yaml.safe_load((ROOT / "examples" / "residual-fashion-mnist.yaml").read_text())
    x = np.zeros((200, 28, 28, 1), np.uint8)  # an image data set: channels last
    dataset_id = upload(client, npz(x=x, y=np.arange(200) % 10)).json()["id"]
    uploaded = {**residual, "dataset": {"id": dataset_id}}
    for body in (residual, uploaded):
        builds.clear()
        response = client.post("/v1/jobs", json=body)
        assert response.status_code == 201, response.text
        assert len(builds) == 1, body["dataset"]
        assert response.json()["model_summary"]["parameters"] > 0
