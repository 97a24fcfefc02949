"""The seed-equivalent jobs submitted to a live service: wall time from POST to `succeeded`.

The service is started as `make run` starts it (embedded default: SQLite and the filesystem
broker; an API and one Celery worker as real processes). Every job pays what a user's job pays:
queueing, the training child's start and framework import, data loading, one metrics row and
one checkpoint per epoch, the final evaluation and the model export.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.schemas.dataset_spec import DatasetSpec
from benchmarks.training.common import SAMPLES
from tests.helpers import migrate_in_subprocess, running_service


def _run_job(client: httpx.Client, spec: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = client.post("/v1/jobs", json=spec)
    response.raise_for_status()
    job_id = response.json()["id"]
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.05)
    wall = time.perf_counter() - started
    if job["status"] != "succeeded":
        raise RuntimeError(f"benchmark job {job_id} ended {job['status']}: {job['error']}")
    return wall, job


def training_samples(dataset: dict[str, Any]) -> int:
    """Fashion-MNIST images one epoch trains on: a `limit` and a validation split take theirs."""
    spec = DatasetSpec.model_validate(dataset)  # its defaults, as the service reads it
    return int(min(spec.limit or SAMPLES, SAMPLES) * (1 - spec.validation_split))


def service_samples_per_second(specs: dict[str, dict[str, Any]], runs: int) -> dict[str, Any]:
    """For each named spec: end-to-end samples/s of each run and the test accuracy reached."""
    results: dict[str, Any] = {name: {"samples_per_second": [], "accuracy": []} for name in specs}
    with tempfile.TemporaryDirectory() as home:
        env = {"EPOCHAL_HOME": str(Path(home) / "home")}
        migrate_in_subprocess(env)
        with running_service(env) as service, service.client() as client:
            for _run in range(runs):
                for name, spec in specs.items():
                    wall, job = _run_job(client, spec)
                    epochs = spec["training"]["epochs"]
                    speed = epochs * training_samples(spec["dataset"]) / wall
                    results[name]["samples_per_second"].append(speed)
                    results[name]["accuracy"].append(job["result"]["test_accuracy"])
    return results
