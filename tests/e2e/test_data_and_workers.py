"""End to end with real processes: an uploaded data set trains in both frameworks, the model is
downloaded and loaded exactly as the docs say; and a job asking for more GPUs than any live
worker has waits, with the reason shown, while smaller jobs run.

There is no GPU on this machine. One worker *declares* two GPUs (EPOCHAL_WORKER_GPUS="0,1"):
that declaration is the one mock here. It decides which queues the worker consumes and what it
reports; nothing in these tests trains on a GPU.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sklearn.datasets import load_digits

from tests.helpers import (
    ROOT,
    Service,
    running_service,
    submit_job,
    wait_for_status,
    wait_until,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def service(service_env: dict[str, str]) -> Iterator[Service]:
    with running_service(service_env, worker=False) as svc:
        svc.start_worker("cpu-worker", {"EPOCHAL_WORKER_GPUS": ""})
        svc.start_worker("gpu-worker", {"EPOCHAL_WORKER_GPUS": "0,1"})  # declared only: no GPU
        yield svc


@pytest.fixture
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as c:
        yield c


def test_a_job_needing_more_gpus_than_any_worker_waits_and_says_why(
    client: httpx.Client,
) -> None:
    def both_live() -> list[dict[str, Any]] | None:
        items = client.get("/v1/workers").json()["items"]
        return items if len(items) == 2 else None

    workers = {w["gpus"]: w for w in wait_until(both_live, 60, "both workers' heartbeats")}
    assert sorted(workers) == [0, 2]
    assert workers[2]["queues"] == ["gpus-0", "gpus-1", "gpus-2"]
    assert [d["id"] for d in workers[2]["devices"]] == ["0", "1"]
    assert workers[0]["queues"] == ["gpus-0"] and workers[0]["devices"] == []
    big = submit_job(client, resources={"gpus": 4}, dataset={"name": "digits"})
    small = submit_job(client, dataset={"name": "digits"}, training={"epochs": 1})
    assert wait_for_status(client, small["id"], {"succeeded", "failed"})["status"] == "succeeded"
    waiting = client.get(f"/v1/jobs/{big['id']}").json()  # still untouched after that
    assert waiting["status"] == "queued" and waiting["attempt"] == 0
    assert [t["to_status"] for t in waiting["transitions"]] == ["queued"]
    assert waiting["wait_reason"] == "waiting for a worker with ≥ 4 GPUs; largest live worker has 2"
    assert client.post(f"/v1/jobs/{big['id']}/cancel").json()["status"] == "cancelled"


def guide_block(title: str) -> str:
    """The predictions guide's python block starting `# {title}`, in "Loading a trained model"."""
    guide = ROOT / "docs" / "guide" / "predictions.md"
    section = guide.read_text().split("## Loading a trained model")[1]
    section = section.split("\n## ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return next(b for b in blocks if b.startswith(f"# {title}"))


def upload_digits(client: httpx.Client) -> tuple[str, np.ndarray, np.ndarray]:
    digits = load_digits()
    x, y = (digits.images / 16).astype(np.float32), digits.target
    buf = io.BytesIO()
    np.savez(buf, x=x[:1400], y=y[:1400], x_test=x[1400:], y_test=y[1400:])
    response = client.post("/v1/datasets", files={"file": ("digits.npz", buf.getvalue())})
    assert response.status_code == 201, response.text
    return response.json()["id"], x[1400:], y[1400:]


@pytest.mark.parametrize(
    ("framework", "block"), [("pytorch", "PyTorch"), ("tensorflow", "TensorFlow")]
)
def test_upload_train_download_and_load_the_model(
    service: Service,
    client: httpx.Client,
    framework: str,
    block: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dataset_id, x_test, y_test = upload_digits(client)
    job = submit_job(
        client,
        framework=framework,
        dataset={"id": dataset_id, "normalize": "none"},  # x is already in [0, 1]
        model={"hidden_units": [64]},
        training={"epochs": 6},
    )
    done = wait_for_status(client, job["id"], {"succeeded", "failed"})
    assert done["status"] == "succeeded", done["error"]
    assert done["result"]["evaluated_on"] == "test" and done["result"]["test_accuracy"] >= 0.8
    listing = client.get(f"/v1/jobs/{job['id']}/artifacts").json()
    by_kind = {item["kind"]: item for item in listing["items"]}
    assert sorted(by_kind) == ["checkpoint", "log", "model", "model_card", "onnx", "spec"]
    assert by_kind["checkpoint"]["epoch"] == 6 and by_kind["model"]["size_bytes"] > 0
    assert (listing["input_shape"], listing["outputs"]) == ([8, 8], 10)
    monkeypatch.chdir(tmp_path)
    names: dict[str, Any] = {"url": service.url, "key": service.api_key, "job_id": job["id"]}
    scope = names | {"x": x_test}
    exec(guide_block(block), scope)  # noqa: S102 (our own docs)
    accuracy = float(np.mean(scope["predicted"] == y_test))
    assert abs(accuracy - done["result"]["test_accuracy"]) <= 0.01
    onnx_scope = names | {"x": x_test}  # raw rows: this upload is used as it is ("none")
    exec(guide_block("ONNX Runtime"), onnx_scope)  # noqa: S102 (our own docs)
    assert float(np.mean(onnx_scope["predicted"] == y_test)) == done["result"]["test_accuracy"]
    assert onnx_scope["card"]["framework"] == framework
    assert client.delete(f"/v1/datasets/{dataset_id}").status_code == 204
