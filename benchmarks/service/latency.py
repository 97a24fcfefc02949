"""submit_to_running: from POST /v1/jobs returning to the job's `running` transition, with an
idle worker waiting, over many tiny jobs (each waits for the previous one to end)."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

import httpx

from benchmarks.service.loadgen import percentile

TINY = {
    "name": "tiny",
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 200, "features": 8},
    "training": {"epochs": 1, "batch_size": 50},
    "model": {"hidden_units": [8]},
}


def wait_terminal(
    client: httpx.Client, job_id: str, timeout: float = 120, interval: float = 0.05
) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job  # type: ignore[no-any-return]
        time.sleep(interval)
    raise TimeoutError(f"job {job_id} did not finish")


def submit_to_running(client: httpx.Client, jobs: int) -> dict[str, float]:
    """Latencies in ms, measured against the worker's own transition timestamp (same clock)."""
    latencies, turnarounds = [], []
    wait_terminal(client, client.post("/v1/jobs", json=TINY).json()["id"])  # warm-up
    for _ in range(jobs):
        response = client.post("/v1/jobs", json=TINY)
        returned = datetime.now(UTC)
        job = wait_terminal(client, response.json()["id"])
        running = next(t for t in job["transitions"] if t["to_status"] == "running")
        # The worker may claim the job before the response reaches us: that counts as 0 ms.
        waited = (datetime.fromisoformat(running["at"]) - returned).total_seconds() * 1000
        latencies.append(max(waited, 0.0))
        finished = datetime.fromisoformat(job["finished_at"])
        turnarounds.append((finished - returned).total_seconds())
    ordered = sorted(latencies)
    return {
        "p50_ms": percentile(ordered, 50),
        "p99_ms": percentile(ordered, 99),
        "turnaround_s": statistics.median(turnarounds),
    }
