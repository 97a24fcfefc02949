"""The client and CLI against the routes other parts of the service provide — uploads,
artifacts, logs, workers — on a live service (embedded default)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from sklearn.datasets import load_digits

from epochal_client.client import ApiError, Client
from tests.helpers import Service, migrate_in_subprocess, run_cli, running_service, scaled

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("contracts") / "home")}
    migrate_in_subprocess(env)
    with running_service(env) as svc:
        yield svc


def epochal(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(service, *args)


def test_upload_train_logs_download_workers(service: Service, tmp_path: Path) -> None:
    digits = load_digits()
    npz = tmp_path / "my-digits.npz"
    np.savez(
        npz,
        x=digits.images[:1500],
        y=digits.target[:1500],
        x_test=digits.images[1500:],
        y_test=digits.target[1500:],
    )
    with Client(service.url, service.api_key) as client:
        dataset = client.upload_dataset(npz, task="classification")
        assert (dataset.name, dataset.samples, dataset.classes) == ("my-digits", 1500, 10)
        assert dataset.id in [d.id for d in client.datasets()]
        job = client.submit(
            {"framework": "pytorch", "dataset": {"id": dataset.id}, "training": {"epochs": 2}}
        )
        done = client.wait(job.id, timeout=scaled(120))
        assert done.status == "succeeded", done.error
        assert done.result is not None and "test_accuracy" in done.result
        assert any("attempt 1" in line for line in client.logs(job.id, tail=50))
        model = client.download_model(job.id, tmp_path)
        assert model.suffix == ".pt" and model.stat().st_size > 1000
        portable = client.download_model(job.id, tmp_path, format="onnx")
        assert portable.suffix == ".onnx"
        # onnxruntime alone, raw rows as uploaded (0..16): the job's own test accuracy, exactly
        session = onnxruntime.InferenceSession(str(portable), providers=["CPUExecutionProvider"])
        (logits,) = session.run(None, {"input": digits.images[1500:].astype(np.float32)})
        accuracy = float(np.mean(np.argmax(logits, axis=1) == digits.target[1500:]))
        assert accuracy == done.result["test_accuracy"]
        assert sum(map(sum, done.result["evaluation"]["confusion_matrix"])) == 297
        assert [w.busy for w in client.workers()] == [False]
        with pytest.raises(ApiError) as missing:
            client.download_model("00000000-0000-0000-0000-000000000000", tmp_path)
        assert missing.value.status == 404
    listing = epochal(service, "datasets", "list")
    assert listing.returncode == 0 and dataset.id in listing.stdout, listing.stderr
    workers = epochal(service, "workers")
    assert workers.returncode == 0 and "worker" in workers.stdout, workers.stderr
    logs = epochal(service, "logs", job.id)
    assert logs.returncode == 0 and "attempt 1" in logs.stdout, logs.stderr
    target = tmp_path / "cli-model.pt"
    download = epochal(service, "download", job.id, str(target))
    assert download.returncode == 0, download.stderr
    assert target.stat().st_size == model.stat().st_size
    card = epochal(service, "download", job.id, str(tmp_path), "--format", "model-card")
    assert card.returncode == 0, card.stderr
    saved = json.loads(next(tmp_path.glob("*-model-card.json")).read_text())
    assert saved["job_id"] == job.id and saved["input"]["shape"] == [None, 8, 8]
    assert saved["normalization"]["kind"] == "unit" and saved["classes"] == list(range(10))


def test_cli_uploads_a_csv_then_follows_a_finished_jobs_log(
    service: Service, tmp_path: Path
) -> None:
    digits = load_digits()
    table = tmp_path / "digits.csv"
    header = ",".join([f"p{i}" for i in range(64)] + ["digit"])
    labelled = np.column_stack([digits.data.astype(int), digits.target])
    rows = [",".join(map(str, row)) for row in labelled]
    table.write_text("\n".join([header, *rows]) + "\n")
    upload = epochal(
        service,
        "datasets",
        "upload",
        str(table),
        "--name",
        "cli-digits",
        "--label-column",
        "digit",
        "--task",
        "classification",
    )
    assert upload.returncode == 0, upload.stderr
    dataset_id = upload.stdout.strip()  # the id alone, to paste into a spec
    with Client(service.url, service.api_key) as client:
        stored = {d.id: d for d in client.datasets()}[dataset_id]
        assert (stored.name, stored.samples, stored.classes) == ("cli-digits", 1797, 10)
        assert stored.shape == [64]
        job = client.submit(
            {"framework": "pytorch", "dataset": {"id": dataset_id}, "training": {"epochs": 2}}
        )
        done = client.wait(job.id, timeout=scaled(120))
        assert done.status == "succeeded", done.error
    started = time.monotonic()
    followed = epochal(service, "logs", job.id, "-f")  # the job has ended: this must return
    assert followed.returncode == 0, followed.stderr
    assert time.monotonic() - started < 30
    lines = followed.stdout.splitlines()
    assert any("attempt 1 ended: succeeded" in line for line in lines)
    assert lines == epochal(service, "logs", job.id).stdout.splitlines()  # each line once
