"""`epochal api --workers 2`: one scrape of /metrics counts the requests of every process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_surface import scrape, value
from tests.helpers import ROOT, free_port, migrate_in_subprocess, wait_until

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
        process.wait(timeout=30)


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
