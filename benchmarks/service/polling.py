"""Polling under load: 200 clients poll metrics (and the running-jobs list, and one job, with a
shared key and with a key each) against a database of 1,000 jobs x 1,000 epochs, the API run as
in production; the load generator is a second process on loopback. On PostgreSQL the same load
is then put on the floor (benchmarks/service/floor_app.py) for comparison."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.orm import Session

from app.domain.keys import create_key
from benchmarks.service.cpu import group_cpu_seconds
from benchmarks.service.seed import insert_jobs, insert_metrics, insert_transitions
from benchmarks.service.stack import engine_for, running
from tests.helpers import VIA_ROUTE, Service, answers, free_port, wait_until

READ_JOBS = 200  # the finished jobs GET /v1/jobs/{id} reads, each with its transitions


def seed_big(env: dict[str, str], jobs: int, epochs: int) -> tuple[list[str], list[str]]:
    engine = engine_for(env)
    finished = insert_jobs(engine, jobs)
    insert_metrics(engine, finished, epochs)
    insert_transitions(engine, finished[:READ_JOBS])
    running_ids = insert_jobs(engine, 50, start=jobs, status="running")
    engine.dispose()
    return finished, running_ids


def load(
    service: Service,
    paths: list[str],
    clients: int,
    rate: float,
    seconds: float,
    keys: list[str] | None = None,
) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(paths, f)
    argv = [
        sys.executable,
        "-m",
        "benchmarks.service.loadgen",
        service.url,
        ",".join(keys or [service.api_key]),
        f.name,
        "--clients",
        str(clients),
        "--rate",
        str(rate),
        "--seconds",
        str(seconds),
    ]
    api = service.processes["api"].pid  # the API's session leader: its group is master + workers
    cpu_before = group_cpu_seconds(api)
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    cpu = group_cpu_seconds(api) - cpu_before
    Path(f.name).unlink()
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    # Everything the API processes did while the phase ran, charged to its requests.
    result["api_cpu_us_per_request"] = cpu * 1e6 / max(result["requests"], 1)
    return result


def idle_cpu(service: Service, seconds: float) -> dict[str, float]:
    """What the API processes spend serving nothing (ticks, maintenance), ms of CPU per s:
    part of every phase's CPU per request below."""
    api = service.processes["api"].pid
    before = group_cpu_seconds(api)
    time.sleep(seconds)
    return {"ms_per_s": (group_cpu_seconds(api) - before) * 1000 / seconds}


def metric_paths(job_ids: list[str], epochs: int, count: int = 2000) -> list[str]:
    """Pollers ask for what is new since a recent epoch, as a following client does."""
    rng = random.Random(7)
    return [
        f"/v1/jobs/{rng.choice(job_ids)}/metrics?since_epoch={rng.randint(epochs - 10, epochs)}"
        for _ in range(count)
    ]


def run_polling(
    env: dict[str, str],
    api_workers: int,
    clients: int,
    seconds: float,
    jobs: int = 1000,
    epochs: int = 1000,
) -> dict[str, dict[str, float]]:
    """Each phase's load result, API CPU per request included; one route per phase."""
    finished, _ = seed_big(env, jobs, epochs)
    results = {}
    with running(env, api_workers=api_workers) as service:
        metrics = metric_paths(finished, epochs)
        load(service, metrics[:50], 10, 0, 2)  # warm caches and connections
        results["idle"] = idle_cpu(service, 5.0)
        results["metrics_poll"] = load(service, metrics, clients, 1.0, seconds)
        results["metrics_poll_half"] = load(service, metrics, clients // 2, 1.0, seconds)
        results["metrics_saturation"] = load(service, metrics, 32, 0, seconds / 2)
        results["running_list_poll"] = load(
            service, ["/v1/jobs?status=running&limit=50"], clients, 1.0, seconds
        )
        # One job, on the fast path and then through the route, in the same run (a ratio).
        one_job = [f"/v1/jobs/{job_id}" for job_id in finished[:READ_JOBS]]
        results["job_read"] = load(service, one_job, clients // 2, 1.0, seconds / 2)
        routed = [f"{path}?{VIA_ROUTE}" for path in one_job]  # the FastAPI route, as before
        results["job_read_route"] = load(service, routed, clients // 2, 1.0, seconds / 2)
        # As many keys as clients, each polling once a second: a key's cached row is older
        # than the cache keeps it at almost every poll (app.domain.keys).
        keys = admin_keys(env, clients // 2)
        for _ in range(3):  # new connections each time: each key seen by each API process
            load(service, one_job, clients // 2, 0, 0.5, keys)
        results["job_read_own_keys"] = load(service, one_job, clients // 2, 1.0, seconds / 2, keys)
    if "EPOCHAL_DATABASE_URL" in env:  # the floor reads with asyncpg: PostgreSQL only
        with floor(env, api_workers) as service:
            load(service, one_job[:50], 10, 0, 2)
            results["floor"] = load(service, one_job, clients // 2, 1.0, seconds / 2)
    return results


def admin_keys(env: dict[str, str], count: int) -> list[str]:
    """`count` new admin keys (an admin sees every job), made straight in the database."""
    engine = engine_for(env)
    with Session(engine) as session, session.begin():
        plain = [create_key(session, f"poller-{n}", is_admin=True)[1] for n in range(count)]
    engine.dispose()
    return plain


@contextmanager
def floor(env: dict[str, str], api_workers: int) -> Iterator[Service]:
    """benchmarks.service.floor_app served as the API is (uvicorn, the same worker count)."""
    service = Service(env, f"http://127.0.0.1:{free_port()}")
    port = service.url.rsplit(":", 1)[1]
    argv = [sys.executable, "-m", "uvicorn", "benchmarks.service.floor_app:app", "--port", port]
    argv += ["--workers", str(api_workers), "--lifespan", "off", "--no-access-log"]
    try:
        service.spawn("api", argv)  # named as the API is: load() charges that process group
        wait_until(lambda: answers(service.url + "/"), 30, "the floor app to answer")
        yield service
    finally:
        service.stop_all()
