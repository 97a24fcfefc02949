"""`Client.predict`, `epochal predict` and `epochal tensorboard` against a live API process
(embedded default, no worker): jobs are moved to `succeeded` through the real state machine
and given the files the worker writes (a model.onnx of tests/onnx_models.py, metrics rows).

The TensorBoard files are read back with TensorBoard's own event reader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud, epoch_rows
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus
from epochal_client.client import ApiError, Client
from epochal_client.predict_images import image_rows
from tests.helpers import ROOT, Service, clear_caches, migrate_in_subprocess, running_service
from tests.onnx_models import TinyModel, write_model
from tests.shard_data import image_bytes

pytestmark = pytest.mark.e2e
SPEC = {
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [32, 16]},
    "optimizer": {"name": "sgd", "learning_rate": 0.05, "momentum": 0.9},
    "training": {"epochs": 3, "batch_size": 64},
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("predict") / "home")}
    migrate_in_subprocess(env)
    with pytest.MonkeyPatch.context() as patch, running_service(env, worker=False) as svc:
        for key, value in env.items():  # this process writes the job's rows and files
            patch.setenv(key, value)
        clear_caches()
        yield svc
    clear_caches()


def finished_job(service: Service, name: str, **spec: object) -> str:
    """A job submitted over HTTP, then run to `succeeded` with three epochs of rows."""
    with service.client() as http:
        job_id: str = http.post("/v1/jobs", json={**SPEC, **spec, "name": name}).json()["id"]
    with session_scope() as session:
        crud.claim_job(session, job_id, "w1", 30)
    with session_scope() as session:
        for epoch in (1, 2, 3):
            row = {"train_loss": 1.0 / epoch, "val_loss": 1.5 / epoch, "val_accuracy": 0.3 * epoch}
            epoch_rows.record_epoch(session, job_id, 1, epoch, {**row, "learning_rate": 0.05})
    with session_scope() as session:
        result = {"test_accuracy": 0.875, "test_loss": 0.4, "evaluated_on": "test"}
        crud.finish_job(
            session, job_id, 1, JobStatus.succeeded, stop_reason="completed", reason="test",
            result=result,
        )  # fmt: skip
    return job_id


def predictor(service: Service) -> tuple[str, TinyModel]:
    job_id = finished_job(service, "predictor")
    return job_id, write_model(JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root)


def epochal(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    env |= {"EPOCHAL_URL": service.url, "EPOCHAL_API_KEY": service.api_key, "COLUMNS": "200"}
    argv = [sys.executable, "-c", "from epochal_client.cli import main; main()", *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


ROWS = np.random.default_rng(5).integers(0, 17, (5, 64))


def test_client_predict_sends_lists_as_json_and_arrays_as_npy(service: Service) -> None:
    job_id, model = predictor(service)
    expected = model.reference(ROWS).argmax(1).tolist()
    with Client(service.url, service.api_key) as client:
        by_list = client.predict(job_id, ROWS.tolist())
        by_array = client.predict(job_id, ROWS.astype(np.uint8))
        assert by_list.predictions == by_array.predictions == expected
        assert by_list.probabilities is not None and len(by_list.probabilities[0]) == 10
        with pytest.raises(ApiError) as bad:
            client.predict(job_id, ROWS[:, :10])
    assert bad.value.status == 422 and "[N, 64]" in bad.value.detail
    assert bad.value.errors[0]["field"] == "inputs"


def test_cli_predicts_from_each_file_type(service: Service, tmp_path: Path) -> None:
    job_id, model = predictor(service)
    expected = model.reference(ROWS).argmax(1).tolist()
    files = {
        "rows.npy": lambda p: np.save(p, ROWS),
        "rows.npz": lambda p: np.savez(p, x=ROWS, y=np.zeros(5)),
        "rows.json": lambda p: p.write_text(json.dumps({"inputs": ROWS.tolist()})),
        "rows.csv": lambda p: p.write_text(
            ",".join(f"p{i}" for i in range(64)) + "\n"
            + "\n".join(",".join(map(str, r)) for r in ROWS)
        ),
    }  # fmt: skip
    for name, write in files.items():
        write(tmp_path / name)
        out = epochal(service, "predict", job_id, str(tmp_path / name), "--json", "--batch", "2")
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        assert answer["predictions"] == expected, name  # three requests of <= 2 rows, merged
        assert len(answer["probabilities"]) == 5
    table = epochal(service, "predict", job_id, str(tmp_path / "rows.npy"))
    assert table.returncode == 0 and table.stdout.split()[:3] == [
        "row",
        "prediction",
        "probability",
    ]
    assert table.stdout.splitlines()[1].split()[:2] == ["0", str(expected[0])]
    bad = epochal(service, "predict", job_id, str(tmp_path / "rows.txt"))
    assert bad.returncode == 2 and "use one of .npy" in bad.stderr


def test_cli_predict_reports_problems(service: Service, tmp_path: Path) -> None:
    job_id = finished_job(service, "no-model")  # succeeded without an exported model
    np.save(tmp_path / "rows.npy", ROWS)
    out = epochal(service, "predict", job_id, str(tmp_path / "rows.npy"))
    assert out.returncode == 1 and "409" in out.stderr and "model.onnx" in out.stderr
    job_id, _ = predictor(service)
    np.save(tmp_path / "wide.npy", np.zeros((2, 65)))
    out = epochal(service, "predict", job_id, str(tmp_path / "wide.npy"))
    assert out.returncode == 1 and "422" in out.stderr and "[N, 64]" in out.stderr


def test_cli_predicts_image_files_in_the_models_input_shape(
    service: Service, tmp_path: Path
) -> None:
    job_id = finished_job(service, "images")
    root = JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root
    model = write_model(root, row_shape=(8, 8, 1))
    rng = np.random.default_rng(6)
    small = rng.integers(0, 256, (8, 8), dtype=np.uint8)
    large = np.kron(rng.integers(0, 256, (8, 8), dtype=np.uint8), np.ones((2, 2), np.uint8))
    (tmp_path / "a.png").write_bytes(image_bytes(small))
    (tmp_path / "b.jpg").write_bytes(image_bytes(np.stack([large] * 3, axis=-1), "JPEG"))
    files = [str(tmp_path / "a.png"), str(tmp_path / "b.jpg")]
    out = epochal(service, "predict", job_id, *files, "--json")
    assert out.returncode == 0, out.stderr
    rows = image_rows([tmp_path / "a.png", tmp_path / "b.jpg"], [8, 8, 1])
    assert np.array_equal(rows[0, ..., 0], small)  # a PNG of the model's size: as it is
    expected = model.reference(rows).argmax(1).tolist()
    assert json.loads(out.stdout)["predictions"] == expected
    np.save(tmp_path / "rows.npy", rows)
    mixed = epochal(service, "predict", job_id, files[0], str(tmp_path / "rows.npy"))
    assert mixed.returncode == 2 and "image files only" in mixed.stderr
    job_id, _ = predictor(service)  # its model takes rows of 64 numbers
    refused = epochal(service, "predict", job_id, files[0])
    assert refused.returncode == 2 and "not images" in refused.stderr


def hparams_of(run_dir: Path) -> tuple[dict[str, object], list[str]]:
    """The hyperparameters and metric names TensorBoard's hparams plugin reads from a run."""
    events = EventAccumulator(str(run_dir))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    values = {k: v.number_value or v.string_value or v.bool_value for k, v in start.hparams.items()}
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    return values, [m.name.tag for m in experiment.experiment.metric_infos]


def test_tensorboard_writes_one_run_per_job_with_scalars_and_hparams(
    service: Service, tmp_path: Path
) -> None:
    first = finished_job(service, "lr 0.05")
    second = finished_job(service, "lr-0.2", optimizer={"name": "adam", "learning_rate": 0.2})
    out = epochal(service, "tensorboard", first, second, "--logdir", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stderr
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == sorted([f"lr-0.05-{first[:8]}", f"lr-0.2-{second[:8]}"])
    run_dir = tmp_path / "runs" / f"lr-0.05-{first[:8]}"
    events = EventAccumulator(str(run_dir))
    events.Reload()
    loss = [(s.step, round(s.value, 6)) for s in events.Scalars("loss/train")]
    assert loss == [(1, 1.0), (2, 0.5), (3, round(1 / 3, 6))]
    assert [s.value for s in events.Scalars("accuracy/val")] == pytest.approx([0.3, 0.6, 0.9])
    assert [s.value for s in events.Scalars("hparam/test_accuracy")] == [0.875]
    assert "loss/val" in events.Tags()["scalars"] and "mae/train" not in events.Tags()["scalars"]
    values, metrics = hparams_of(run_dir)
    assert values["optimizer.learning_rate"] == pytest.approx(0.05)
    assert values["optimizer.name"] == "sgd" and values["framework"] == "pytorch"
    assert values["training.batch_size"] == 64 and values["model.hidden_units"] == "32,16"
    assert {"hparam/test_accuracy", "hparam/last_val_loss"} <= set(metrics)
    other, _ = hparams_of(tmp_path / "runs" / f"lr-0.2-{second[:8]}")
    assert other["optimizer.learning_rate"] == pytest.approx(0.2)
    assert other["optimizer.name"] == "adam"
