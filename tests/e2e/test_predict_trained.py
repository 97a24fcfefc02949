"""Predictions of really trained jobs, both frameworks, through the live API: the answer is
what ONNX Runtime computes on the job's own model.onnx, the model is good on raw digits, and
the same jobs become TensorBoard runs read back with TensorBoard's reader."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from sklearn.datasets import load_digits
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from epochal_client.client import Client
from epochal_client.tensorboard_export import write_run
from tests.helpers import Service, migrate_in_subprocess, running_service, wait_for_status

pytestmark = [pytest.mark.e2e, pytest.mark.torch, pytest.mark.tf]
FRAMEWORKS = ("pytorch", "tensorflow")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("predict-trained") / "home")}
    migrate_in_subprocess(env)
    with running_service(env) as svc:
        yield svc


@pytest.fixture(scope="module")
def jobs(service: Service) -> dict[str, str]:
    """One succeeded digits MLP per framework (submitted together, trained one after another)."""
    spec = {
        "dataset": {"name": "digits"},
        "model": {"hidden_units": [64]},
        "training": {"epochs": 4, "batch_size": 64},
    }
    with service.client() as http:
        ids = {
            fw: http.post(
                "/v1/jobs", json={**spec, "framework": fw, "name": f"digits-{fw}"}
            ).json()["id"]
            for fw in FRAMEWORKS
        }
        for job_id in ids.values():
            assert (
                wait_for_status(http, job_id, {"succeeded", "failed"}, 600)["status"] == "succeeded"
            )
    return ids


def model_dir(service: Service, job_id: str) -> Path:
    return Path(service.env["EPOCHAL_HOME"]) / "artifacts" / job_id / "model"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_predictions_are_onnx_runtime_on_the_jobs_model(
    service: Service, jobs: dict[str, str], framework: str
) -> None:
    job_id, digits = jobs[framework], load_digits()
    card = json.loads((model_dir(service, job_id) / "model-card.json").read_text())
    rows = digits.images.reshape(len(digits.images), *card["input"]["shape"][1:])[:600]
    with Client(service.url, service.api_key) as client:
        parts = [client.predict(job_id, rows[i : i + 200]) for i in range(0, len(rows), 200)]
        by_json = client.predict(job_id, rows[:50].tolist())
    predictions = [p for part in parts for p in part.predictions]
    session = ort.InferenceSession(str(model_dir(service, job_id) / "model.onnx"))
    (logits,) = session.run(None, {card["input"]["name"]: rows.astype(np.float32)})
    assert predictions == logits.argmax(1).tolist()  # raw rows: the model normalizes
    assert by_json.predictions == predictions[:50]
    accuracy = float(np.mean(np.array(predictions) == digits.target[:600]))
    assert accuracy > 0.8, accuracy  # a trained model on (mostly) its own training rows
    probabilities = np.array(parts[0].probabilities)
    np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-5)
    assert probabilities.argmax(1).tolist() == predictions[:200]


def test_trained_jobs_become_tensorboard_runs(
    service: Service, jobs: dict[str, str], tmp_path: Path
) -> None:
    with Client(service.url, service.api_key) as client:
        for framework, job_id in jobs.items():
            job, rows = client.get(job_id), client.metrics(job_id)
            run_dir = write_run(tmp_path, job, rows)
            events = EventAccumulator(str(run_dir))
            events.Reload()
            losses = events.Scalars("loss/train")
            assert [s.step for s in losses] == [1, 2, 3, 4], framework
            assert [s.value for s in losses] == pytest.approx([r.train_loss for r in rows])
            assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")
    assert len(list(tmp_path.iterdir())) == 2
