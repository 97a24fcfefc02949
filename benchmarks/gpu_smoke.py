"""`python -m benchmarks.gpu_smoke` (`make gpu-smoke`): the GPU path through the real service.

The embedded default as `epochal up` runs it (an API and a worker as real processes, in a
temporary EPOCHAL_HOME), the worker owning every visible GPU. One job per framework on one GPU
in each `resources.precision` (fp32, bf16, fp16), and with two GPUs or more one job per
framework replicated over all of them (DDP, MirroredStrategy); then a table of each job's
status, epochs, final metric and wall time. A few minutes on one GPU (digits, 2 epochs); exits
1 when a job did not succeed or a framework sees no GPU. Without a GPU it says so and exits 0:
nothing is simulated.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from app.core.config import Settings
from benchmarks import machine
from benchmarks.gpu import FRAMEWORKS, visible_gpus

PRECISIONS = ("fp32", "bf16", "fp16")
EPOCHS, BATCH_PER_GPU = 2, 64
BUDGET_SECONDS = 270  # every job ended by then, or the table says which did not
ENDED = ("succeeded", "failed", "cancelled")
HEADER = ["job", "status", "epochs", "final metric", "replicas", "wall s"]


@dataclass(frozen=True)
class SmokeJob:
    """One job of the smoke run: a framework on `gpus` GPUs (one replica each) in a precision."""

    framework: str
    gpus: int
    precision: str

    @property
    def name(self) -> str:
        return f"{self.framework}-{self.gpus}gpu-{self.precision}"

    def spec(self) -> dict[str, Any]:
        return {
            "name": f"gpu-smoke {self.name}",
            "framework": self.framework,
            "dataset": {"name": "digits"},
            "training": {"epochs": EPOCHS, "batch_size": BATCH_PER_GPU * max(self.gpus, 1)},
            "resources": {"gpus": self.gpus, "precision": self.precision},
            "max_restarts": 0,  # a failure shows at once instead of being retried
            "tags": {"smoke": "gpu"},
        }


def plan(gpus: int, frameworks: tuple[str, ...] = FRAMEWORKS) -> list[SmokeJob]:
    """Each framework in each precision on one GPU, then over all `gpus` when there are two+."""
    jobs = [SmokeJob(f, 1, p) for f in frameworks for p in PRECISIONS]
    return jobs + ([SmokeJob(f, gpus, "fp32") for f in frameworks] if gpus > 1 else [])


def _seconds(job: dict[str, Any]) -> str:
    if not (job.get("started_at") and job.get("finished_at")):
        return "-"
    started, finished = (datetime.fromisoformat(job[k]) for k in ("started_at", "finished_at"))
    return f"{(finished - started).total_seconds():.1f}"


def result_row(smoke: SmokeJob, job: dict[str, Any] | None) -> list[str]:
    """The table's row for one job, from its GET /v1/jobs/{id} body (None: never submitted)."""
    if job is None:
        return [smoke.name, "not submitted", "-", "-", "-", "-"]
    status = job["status"] + (f" ({job['error_code']})" if job.get("error_code") else "")
    if job["status"] not in ENDED:
        status += " at the deadline"
    result = job.get("result") or {}
    metric = f"{result.get('evaluated_on', 'val')}_accuracy"
    final = f"{metric} {result[metric]:.4f}" if metric in result else "-"
    replicas = f"{result['replicas']} {result['strategy']}" if "replicas" in result else "-"
    epochs = f"{job['current_epoch']}/{job['epochs']}"
    return [smoke.name, status, epochs, final, replicas, _seconds(job)]


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    lines = [HEADER, ["-" * w for w in widths], *rows]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in lines)


def all_succeeded(jobs: dict[SmokeJob, dict[str, Any] | None]) -> bool:
    return all(job is not None and job["status"] == "succeeded" for job in jobs.values())


def gpus_or_reason() -> tuple[dict[str, list[str]], str | None]:
    """The GPUs each framework sees, or why there is nothing to run here; cheap checks first."""
    if shutil.which("nvidia-smi") is None:
        return {}, "nvidia-smi is not installed"
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return {}, "CUDA_VISIBLE_DEVICES hides every GPU"
    torch = visible_gpus(("pytorch",))
    if not torch["pytorch"]:
        return {}, "PyTorch sees no CUDA device"
    return torch | visible_gpus(("tensorflow",)), None


def run_jobs(jobs: list[SmokeJob], worker_gpus: str) -> dict[SmokeJob, dict[str, Any] | None]:
    """Submit every job to a fresh embedded service, wait for all (or the budget); their bodies."""
    from tests.helpers import migrate_in_subprocess, running_service

    deadline = time.monotonic() + BUDGET_SECONDS
    with tempfile.TemporaryDirectory(prefix="epochal-gpu-smoke-") as home:
        env = {
            "EPOCHAL_HOME": str(Path(home) / "home"),
            "EPOCHAL_WORKER_GPUS": worker_gpus,
            # As `epochal up` runs (the test helpers warm PyTorch only) and as the worker image:
            # a warm TensorFlow child waits beside a running PyTorch job on the same GPU.
            "EPOCHAL_WARM_FRAMEWORKS": Settings.model_fields["warm_frameworks"].default,
            "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        }
        migrate_in_subprocess(env)
        with running_service(env) as service, service.client() as client:
            ids = {}
            for smoke in jobs:
                response = client.post("/v1/jobs", json=smoke.spec())
                if response.status_code != 201:
                    print(f"{smoke.name}: refused at submit: {response.text}", flush=True)
                    continue
                ids[smoke] = response.json()["id"]
            done: dict[SmokeJob, dict[str, Any] | None] = dict.fromkeys(jobs)
            while True:
                for smoke, job_id in ids.items():
                    done[smoke] = client.get(f"/v1/jobs/{job_id}").json()
                pending = [j for j in done.values() if j and j["status"] not in ENDED]
                if not pending or time.monotonic() > deadline:
                    return done
                time.sleep(1)


def main() -> int:
    print(f"machine: {machine.describe()}", flush=True)
    gpus, reason = gpus_or_reason()
    if reason:
        print(f"no GPU here ({reason}): nothing to smoke-test (exit 0)")
        return 0
    count = len(gpus["pytorch"])
    for framework, names in gpus.items():
        print(f"{framework} sees {len(names)} GPU(s): {', '.join(names) or 'none'}", flush=True)
    # A framework blind to the GPUs would train its `gpus: 1` jobs on the CPU or fail: that is
    # a broken GPU path to report, not to run.
    blind = [f for f, names in gpus.items() if not names]
    for framework in blind:
        print(f"{framework} sees no GPU: its jobs are left out and the run fails", flush=True)
    jobs = plan(count, tuple(f for f in FRAMEWORKS if f not in blind))
    if count == 1:
        print("one GPU: the multi-replica jobs need two or more and are left out", flush=True)
    worker_gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(map(str, range(count)))
    started = time.perf_counter()
    results = run_jobs(jobs, worker_gpus)
    print(format_table([result_row(smoke, job) for smoke, job in results.items()]))
    print(f"{len(jobs)} jobs in {time.perf_counter() - started:.0f} s", flush=True)
    return 0 if all_succeeded(results) and not blind else 1


if __name__ == "__main__":
    sys.exit(main())
