"""Small jobs back to back on a CPU worker, the next warm child importing beside each one: the
worker as it runs (the import at idle CPU priority, worker.cpu_priority) against the same worker
without the right to come back from idle priority (no CAP_SYS_NICE, RLIMIT_NICE 0: the import
at normal priority, as before). Those jobs train on every CPU but one (EPOCHAL_WORKER_CPUS), so
the import has a core beside them, as on a box of 4 CPUs or more. A third worker keeps the
default: under 4 CPUs its jobs train on every core and the next child imports when each ends
(worker.supervisor.threads)."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from benchmarks.service.stack import bench_env, running
from tests.helpers import CHECKOUT_CLI, Service, wait_for_status

# The worker's command without CAP_SYS_NICE and with RLIMIT_NICE 0, as in a default container.
UNPRIVILEGED = (
    *("prlimit", "--nice=0:0", "--"),
    *("setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"),
)
SPEC: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [32]},
    "training": {"epochs": 5, "batch_size": 32},
}


def run_jobs(unprivileged: bool, jobs: int, beside: bool = True) -> dict[str, float]:
    """Median fit seconds and POST-to-end wall of `jobs` small jobs, one after another."""
    with bench_env("sqlite") as settings:
        if beside:
            settings["EPOCHAL_WORKER_CPUS"] = str(max(1, len(os.sched_getaffinity(0)) - 1))
        with running(settings) as service:
            return _run(service, unprivileged, jobs)


def _run(service: Service, unprivileged: bool, jobs: int) -> dict[str, float]:
    if unprivileged:  # only the worker's command: the API and the key are made already
        service.command = (*UNPRIVILEGED, *CHECKOUT_CLI)
    service.start_worker()
    return _measure(service, jobs)


def _measure(service: Service, jobs: int) -> dict[str, float]:
    fits, walls = [], []
    with service.client() as client:
        time.sleep(10)  # the worker's first warm children have imported
        for _ in range(jobs):
            started = time.monotonic()
            job = client.post("/v1/jobs", json=SPEC).json()
            done = wait_for_status(client, job["id"], {"succeeded", "failed"}, 300)
            assert done["status"] == "succeeded", done["error"]
            walls.append(time.monotonic() - started)
            fits.append(done["result"]["timings"]["fit_s"])
    return {"fit_s": statistics.median(fits), "wall_s": statistics.median(walls)}


def measure(jobs: int) -> dict[str, dict[str, float]]:
    """The three workers, the unprivileged one (the baseline) first."""
    return {
        "normal": run_jobs(True, jobs),
        "idle": run_jobs(False, jobs),
        "after": run_jobs(False, jobs, beside=False),
    }
