"""A queued job's read against a metrics poll, in API CPU per request, in the same run: 200
queued jobs behind a running one on a busy live worker (so each has a position, a reason and
an estimated start), PostgreSQL + Redis, the API as `epochal api --workers 2`, 100 clients
polling once a second. The API's maintenance rounds (which keep the stored standings current)
run meanwhile and are charged to the requests, as every phase's CPU is."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.domain.tables import Job, Worker, utcnow
from benchmarks.service.polling import idle_cpu, load, metric_paths
from benchmarks.service.report import Report
from benchmarks.service.seed import insert_epoch_stats, insert_jobs, insert_metrics
from benchmarks.service.stack import bench_env, engine_for, running
from tests.helpers import Service, wait_until

QUEUED = 200
POLLED, EPOCHS = 50, 100  # the finished jobs whose metrics are polled, and their rows


def seed(env: dict[str, str]) -> tuple[list[str], list[str]]:
    """Finished jobs with rows, one running job on a busy worker, and QUEUED jobs behind it."""
    engine = engine_for(env)
    finished = insert_jobs(engine, POLLED)
    insert_metrics(engine, finished, EPOCHS)
    insert_epoch_stats(engine, POLLED * EPOCHS)  # so each queued job has an estimated start
    (running_id,) = insert_jobs(engine, 1, start=POLLED, status="running")
    insert_metrics(engine, [running_id], 3)
    queued = insert_jobs(engine, QUEUED, start=POLLED + 1, status="queued")
    with Session(engine) as session, session.begin():
        session.execute(update(Job).where(Job.id == running_id).values(current_epoch=3))
        # Its heartbeat ahead of the run: the worker stays live without a worker process,
        # which would take the queued jobs.
        ahead = utcnow() + timedelta(days=1)
        worker = Worker(name="w1", hostname="h", pid=1, gpus=0, devices=[], queues=["gpus-0"])
        session.add(worker)
        session.flush()
        session.execute(update(Worker).values(heartbeat_at=ahead, current_job_id=running_id))
    engine.dispose()
    return finished, queued


def placed(service: Service, job_id: str) -> dict[str, Any] | None:
    """The job's standing once it has a position (before that, none is worked out yet)."""
    headers = {"Authorization": f"Bearer {service.api_key}"}
    answer = httpx.get(f"{service.url}/v1/jobs/{job_id}", headers=headers)
    # Any answer but 200 will not turn into a standing: say what it was rather than wait.
    assert answer.status_code == 200, f"GET /v1/jobs/{job_id}: {answer.status_code} {answer.text}"
    job = answer.json()
    queue: dict[str, Any] | None = job.get("queue")
    return queue if queue and queue.get("position") is not None else None


def run_queued_read(env: dict[str, str], clients: int, seconds: float) -> dict[str, Any]:
    finished, queued = seed(env)
    with running(env, api_workers=2) as service:
        last = wait_until(lambda: placed(service, queued[-1]), 30, "the standings worked out")
        metrics = metric_paths(finished, EPOCHS)
        load(service, metrics[:50], 10, 0, 2)  # warm caches and connections
        reads = [f"/v1/jobs/{job_id}" for job_id in queued]
        load(service, reads[:50], 10, 0, 2)
        results: dict[str, Any] = {"last": last}
        results["metrics_poll"] = load(service, metrics, clients, 1.0, seconds)
        results["queued_read"] = load(service, reads, clients, 1.0, seconds)
        results["idle"] = idle_cpu(service, seconds)
    return results


def over_idle(phase: dict[str, Any], idle_ms_per_s: float, seconds: float) -> float:
    """A phase's API CPU per request less what the API spends serving nothing over the same
    time (its ticks and maintenance rounds, which at 100 requests a second are most of it)."""
    per_second = phase["requests"] / seconds
    return float(phase["api_cpu_us_per_request"]) - idle_ms_per_s * 1000 / max(per_second, 1e-9)


def bench_queued_read(report: Report, quick: bool) -> None:
    clients, seconds = (100, 5) if quick else (100, 20)
    with bench_env("postgres") as env:
        found = run_queued_read(env, clients, seconds)
    setup = f"{QUEUED} queued, {clients} clients x 1/s, 2 uvicorn workers, PostgreSQL"
    poll = found["metrics_poll"]["api_cpu_us_per_request"]
    read = found["queued_read"]["api_cpu_us_per_request"]
    print(f"last queued job's standing: {found['last']}", flush=True)
    report.add("api_cpu_us_per_queued_job_read", read, "us", f"GET /v1/jobs/{{id}}; {setup}")
    report.add("api_cpu_us_per_metrics_poll_same_run", poll, "us", "the same load, same run")
    ratio = read / max(poll, 1e-9)
    note = "queued job's read / metrics poll, API CPU; goal <= 3 and <= 1,000 us"
    report.add("queued_read_over_metrics_poll_cpu", ratio, "x", note)
    report.add("queued_read_p99_ms", found["queued_read"]["p99_ms"], "ms", setup)
    idle = found["idle"]["ms_per_s"]
    report.add("api_idle_cpu_ms_per_s_queued", idle, "ms/s", "the API serving nothing, same run")
    for name in ("queued_read", "metrics_poll"):
        net = over_idle(found[name], idle, seconds)
        report.add(f"api_cpu_us_per_{name}_over_idle", net, "us", "less the idle CPU's share")
