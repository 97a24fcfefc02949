"""predict_*: POST /v1/jobs/{id}/predict over HTTP with a key, on the seed MLP (digits, 128-64):
latency for one row and for 256 rows (JSON, and .npy for 256), and predictions per second.

The job is trained by the worker; a job that finished without a `model.onnx` (a worker that
does not export yet) gets a stand-in of the same shape written with the tests' ONNX builder,
which the result's note says. One client, back to back, keep-alive, as a caller in a loop.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.service.latency import wait_terminal
from benchmarks.service.loadgen import percentile

SEED_MLP = {
    "name": "bench-predict",
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [128, 64]},
    "training": {"epochs": 3, "batch_size": 64},
}


def trained_job(client: httpx.Client, artifacts_dir: Path) -> tuple[str, tuple[int, ...], str]:
    """A succeeded seed-MLP job that can predict, its model's row shape, and where it came from."""
    job = wait_terminal(client, client.post("/v1/jobs", json=SEED_MLP).json()["id"], 600)
    assert job["status"] == "succeeded", job
    model_dir = artifacts_dir / job["id"] / "model"
    if (model_dir / "model.onnx").is_file():
        card = json.loads((model_dir / "model-card.json").read_text())
        return job["id"], tuple(card["input"]["shape"][1:]), "exported by the worker"
    from tests.onnx_models import write_model  # the benchmark runs from the checkout

    write_model(artifacts_dir / job["id"], row_shape=(8, 8), hidden=(128, 64), outputs=10)
    return job["id"], (8, 8), "stand-in model.onnx of the same shape"


def _timed(send: Any, runs: int, warmup: int) -> list[float]:
    """Milliseconds per call, sorted, after `warmup` untimed calls."""
    for _ in range(warmup):
        send()
    latencies = []
    for _ in range(runs):
        started = time.perf_counter()
        send()
        latencies.append((time.perf_counter() - started) * 1000)
    return sorted(latencies)


def measure(
    client: httpx.Client, job_id: str, row_shape: tuple[int, ...], quick: bool
) -> dict[str, float]:
    """p50/p99 for 1 and 256 rows, and rows per second at 256 rows a request."""
    url = f"/v1/jobs/{job_id}/predict"
    rows = np.random.default_rng(0).integers(0, 17, (256, *row_shape))  # digits: 0..16
    one = {"inputs": rows[:1].tolist()}
    many = {"inputs": rows.tolist()}
    buffer = io.BytesIO()
    np.save(buffer, rows.astype(np.float32), allow_pickle=False)
    npy, npy_type = buffer.getvalue(), {"Content-Type": "application/x-npy"}

    def post(**kwargs: Any) -> None:
        client.post(url, **kwargs).raise_for_status()

    def get_job() -> None:  # the same key check and job lookup without a model: the baseline
        client.get(f"/v1/jobs/{job_id}").raise_for_status()

    small, large = (200, 40) if quick else (1000, 200)
    results: dict[str, float] = {}
    for name, runs, send in (
        ("get_job", small, get_job),
        ("1_row", small, lambda: post(json=one)),
        ("256_rows", large, lambda: post(json=many)),
        ("256_rows_npy", large, lambda: post(content=npy, headers=npy_type)),
    ):
        latencies = _timed(send, runs, warmup=20)
        results[f"{name}_p50_ms"] = percentile(latencies, 50)
        results[f"{name}_p99_ms"] = percentile(latencies, 99)
        results[f"{name}_per_s"] = (256 if "256" in name else 1) * 1000 * runs / sum(latencies)
    return results
