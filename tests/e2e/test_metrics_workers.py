"""/metrics from the API alone: one scrape counts the requests of every uvicorn process, and
the queue and fleet gauges come from the database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_surface import scrape, value
from tests.helpers import (
    ROOT,
    configure,
    free_port,
    migrate_in_subprocess,
    running_service,
    scaled,
    submit_job,
    wait_until,
)
from worker.supervisor.heartbeat import beat

pytestmark = pytest.mark.e2e
HEALTHZ = {"method": "GET", "route": "/healthz", "status": "200"}


def test_scrapes_sum_all_uvicorn_workers(tmp_path: Path) -> None:
    env = {"EPOCHAL_HOME": str(tmp_path / "home")}
    migrate_in_subprocess(env)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "api", "--workers", "2", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _up(url), 60, "two API workers")
        before = value(scrape(url), "epochal_http_request_duration_seconds_count", **HEALTHZ)
        for _ in range(20):  # a new connection each: the kernel spreads them over both workers
            httpx.get(f"{url}/healthz", timeout=10)
        counts = {
            value(scrape(url), "epochal_http_request_duration_seconds_count", **HEALTHZ)
            for _ in range(4)
        }
        assert counts == {before + 20}
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=scaled(30))


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_queue_and_fleet_gauges_without_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"EPOCHAL_HOME": str(tmp_path / "home")}
    migrate_in_subprocess(env)
    configure(monkeypatch, env)  # this process writes a worker's heartbeat row below
    with running_service(env, worker=False) as service, service.client() as http:
        empty = scrape(service.url)
        for name in ("epochal_queue_depth", "epochal_gpus_live", "epochal_workers_live"):
            assert (name, ()) in empty and empty[name, ()] == 0, name  # present while zero
        jobs = [submit_job(http, dataset={"name": "digits"})["id"] for _ in range(2)]
        queued = scrape(service.url)
        assert value(queued, "epochal_queue_depth") == 2  # nobody takes them
        assert value(queued, "epochal_queue_oldest_seconds") > 0
        assert value(queued, "epochal_gpus_live") == 0
        http.post(f"/v1/jobs/{jobs[0]}/cancel").raise_for_status()
        assert value(scrape(service.url), "epochal_queue_depth") == 1
        two_gpus = [{"id": str(i), "name": None, "memory_mb": None} for i in range(2)]
        beat("gpu-box", two_gpus)  # the row a live worker owning two GPUs keeps fresh
        fleet = scrape(service.url)
        assert value(fleet, "epochal_gpus_live") == 2
        assert value(fleet, "epochal_workers_live") == 1
