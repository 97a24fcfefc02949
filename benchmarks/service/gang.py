"""A two-node job (PyTorch over gloo, TensorFlow's MultiWorkerMirroredStrategy; on CPU) against
one worker's one and two replicas, side by side, framework by framework.

Two workers, each on a home of its own as on two boxes, on PostgreSQL + Redis, both idle when
each job is submitted (enough workers free), jobs alternating run by run after one unmeasured
job (the workers' own start-up imports are over):
- first step: from POST returning to the first training step, taken as the epoch-1 row's
  `recorded_at` less its `epoch_seconds` (both from the training process, this host's clock);
  a gang's nodes start cold (framework import, DDP rendezvous), a one-node job may get the
  worker's warm child;
- per-epoch cost: the median `epoch_seconds` of epochs 2..N (the first pays the warm-up), of
  the same spec and global batch on 2 nodes x 1 replica, 1 node x 1 and 1 node x 2.
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

import httpx
from sqlalchemy import text

from benchmarks.service.latency import wait_terminal
from benchmarks.service.stack import engine_for
from tests.helpers import Service

LAYOUTS = {"1x1": {}, "1x2": {"replicas": 2}, "2x1": {"nodes": 2}}  # nodes x replicas
FRAMEWORKS = ("pytorch", "tensorflow")
SPEC: dict[str, Any] = {
    "dataset": {"name": "fashion_mnist", "limit": 12000},
    "model": {"hidden_units": [128, 64]},
    "training": {"batch_size": 128},  # the global batch: split over the replicas
}


def start_workers(service: Service) -> None:
    """Two workers, each with a home (artifacts, checkpoints) of its own."""
    for name in ("a", "b"):
        home = Path(tempfile.mkdtemp(prefix=f"epochal-bench-gang-{name}-"))
        service.start_worker(name, {"EPOCHAL_HOME": str(home)})


def wait_both_free(client: httpx.Client, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = client.get("/v1/workers").json()["items"]
        if len(workers) >= 2 and not any(w["busy"] for w in workers):
            return
        time.sleep(0.2)
    raise TimeoutError("two free workers")


def first_step_at(service: Service, job_id: str) -> datetime:
    """When epoch 1 began: its row's recorded_at less its epoch_seconds."""
    engine = engine_for(service.env)
    try:
        with engine.connect() as conn:
            at, seconds = conn.execute(
                text(
                    "SELECT recorded_at, epoch_seconds FROM epoch_metric "
                    "WHERE job_id = :j AND epoch = 1"
                ),
                {"j": job_id},
            ).one()
    finally:
        engine.dispose()
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return datetime.fromtimestamp(at.timestamp() - float(seconds), UTC)


def one_job(
    service: Service, client: httpx.Client, framework: str, layout: str, epochs: int
) -> dict[str, float]:
    """A job of `layout` with both workers free: POST to first step, and its epochs' cost."""
    wait_both_free(client)
    spec = {**SPEC, "framework": framework, "training": {**SPEC["training"], "epochs": epochs}}
    response = client.post("/v1/jobs", json={**spec, "resources": LAYOUTS[layout]})
    posted = datetime.now(UTC)
    response.raise_for_status()
    job = wait_terminal(client, response.json()["id"], timeout=600, interval=1.0)
    if job["status"] != "succeeded":
        ended = f"{job['status']}: {job['error']}"
        raise RuntimeError(f"gang benchmark job ({framework} {layout}) ended {ended}")
    rows = client.get(f"/v1/jobs/{job['id']}/metrics").json()["items"]
    epoch_s = median(float(row["epoch_seconds"]) for row in rows[1:])
    first = (first_step_at(service, job["id"]) - posted).total_seconds()
    return {"first_step_s": first, "epoch_s": epoch_s}


def measure(
    service: Service, client: httpx.Client, framework: str, epochs: int, runs: int
) -> dict[str, Any]:
    """Per layout: the median first step and per-epoch cost, and each against 1x1's (medians
    of per-run ratios: a slow moment of the shared machine hits a run's jobs alike)."""
    one_job(service, client, framework, "1x1", 2)  # unmeasured: the first imports are done
    results: dict[str, list[dict[str, float]]] = {layout: [] for layout in LAYOUTS}
    for _ in range(runs):
        for layout in LAYOUTS:
            results[layout].append(one_job(service, client, framework, layout, epochs))
    base = results["1x1"]
    summary: dict[str, Any] = {}
    for layout, found in results.items():
        for key in ("first_step_s", "epoch_s"):
            ratios = [r[key] / b[key] for r, b in zip(found, base, strict=True)]
            summary[f"{key}_{layout}"] = median(r[key] for r in found)
            summary[f"{key}_{layout}_x"] = median(ratios)
    return summary
