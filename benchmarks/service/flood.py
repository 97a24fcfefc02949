"""Unauthenticated scrapers cannot degrade the service: 200 clients scrape
`GET /metrics` back to back while an authenticated client lists jobs 10 times a second, the
API run as in production (PostgreSQL, 2 uvicorn workers) over 200 jobs x 100 epochs of history.
The same probe alone first, in the same run, is the baseline. Both load generators are
processes of their own on loopback (benchmarks.service.loadgen)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.service.polling import seed_big
from benchmarks.service.stack import running

PROBE = "/v1/jobs?limit=5"


def loadgen(url: str, key: str, path: str, clients: int, rate: float, seconds: float) -> Any:
    """Start a load generator on one path; its process (JSON on stdout when it ends)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([path], f)
    argv = [sys.executable, "-m", "benchmarks.service.loadgen", url, key, f.name]
    argv += ["--clients", str(clients), "--rate", str(rate), "--seconds", str(seconds)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True), Path(f.name)


def result_of(started: tuple[Any, Path]) -> dict[str, Any]:
    process, paths = started
    out, _ = process.communicate(timeout=300)
    paths.unlink()
    return dict(json.loads(out.strip().splitlines()[-1]))


def run_flood(env: dict[str, str], scrapers: int, seconds: float) -> dict[str, dict[str, Any]]:
    """The probe alone, then the probe under `scrapers` back-to-back /metrics clients."""
    seed_big(env, jobs=200, epochs=100)
    with running(env, api_workers=2) as service:
        url, key = service.url, service.api_key
        alone = result_of(loadgen(url, key, PROBE, 5, 2.0, seconds))
        flood = loadgen(url, key, "/metrics", scrapers, 0.0, seconds + 4)
        probe = result_of(loadgen(url, key, PROBE, 5, 2.0, seconds))
        return {"alone": alone, "flooded": probe, "scrapers": result_of(flood)}
