"""The SSE stream under load: 200 subscribers follow 20 running jobs while a writer adds one
epoch row per job every half second, as a busy cluster would. Reports events delivered per
second and the lag from a row's commit (`recorded_at`) to its arrival at a subscriber.

The subscribers are a second process on loopback:
`python -m benchmarks.service.sse URL KEY JOBS.json --per-job 10 --seconds 15` prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from app.domain.tables import EpochMetric
from benchmarks.service.cpu import group_cpu_seconds
from benchmarks.service.loadgen import percentile
from benchmarks.service.seed import insert_jobs
from benchmarks.service.stack import engine_for, running


async def follow(
    http: httpx.AsyncClient,
    job_id: str,
    stop_at: float,
    lags: list[float],
    received: list[float],
    ready: list[int],
    errors: list[str],
) -> None:
    """One subscriber: read the stream, note each epoch's lag, stop at stop_at."""
    try:
        async with http.stream("GET", f"/v1/jobs/{job_id}/events") as response:
            response.raise_for_status()
            ready.append(1)
            kind = ""
            async for line in response.aiter_lines():
                if time.time() >= stop_at:
                    return
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:") and kind == "epoch":
                    recorded = datetime.fromisoformat(json.loads(line[5:])["recorded_at"])
                    if recorded.tzinfo is None:
                        recorded = recorded.replace(tzinfo=UTC)
                    now = datetime.now(UTC)
                    lags.append((now - recorded).total_seconds() * 1000)
                    received.append(now.timestamp())
    except httpx.HTTPError as exc:
        errors.append(type(exc).__name__ + ": " + str(exc)[:80])


async def subscribe(url: str, key: str, jobs: list[str], per_job: int, seconds: float) -> dict:  # type: ignore[type-arg]
    clients = len(jobs) * per_job
    limits = httpx.Limits(max_connections=clients + 1, max_keepalive_connections=clients + 1)
    headers = {"Authorization": f"Bearer {key}"}
    lags: list[float] = []
    received: list[float] = []
    ready: list[int] = []
    errors: list[str] = []
    timeout = httpx.Timeout(30, read=None)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=timeout
    ) as http:
        stop_at = time.time() + seconds
        tasks = [
            follow(http, job, stop_at, lags, received, ready, errors)
            for job in jobs
            for _ in range(per_job)
        ]
        try:  # a stream that went quiet must not hold the result back
            await asyncio.wait_for(asyncio.gather(*tasks), seconds + 10)
        except TimeoutError:
            pass
    ordered = sorted(lags)
    return {
        "subscribers": len(ready),
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "events": len(ordered),
        # over the time events flowed (the writer starts 2 s after the subscribers)
        "events_per_s": len(ordered) / max(max(received) - min(received), 1e-9) if lags else 0.0,
        "lag_p50_ms": percentile(ordered, 50),
        "lag_p99_ms": percentile(ordered, 99),
    }


def write_epochs(
    env: dict[str, str], jobs: list[str], interval: float, stop: threading.Event
) -> None:
    """One epoch row per job every `interval` seconds, each batch in its own transaction."""
    engine = engine_for(env)
    epoch = 0
    while not stop.wait(interval if epoch else 2.0):  # the first rows after subscribers join
        epoch += 1
        now = datetime.now(UTC)
        rows = [
            {"job_id": j, "epoch": epoch, "attempt": 1, "train_loss": 1 / epoch, "recorded_at": now}
            for j in jobs
        ]
        with engine.begin() as conn:
            conn.execute(insert(EpochMetric), rows)
    engine.dispose()


def run_sse(env: dict[str, str], jobs: int, per_job: int, seconds: float) -> dict[str, Any]:
    """Seed running jobs, start the API (2 workers), subscribers and the writer; the result."""
    engine = engine_for(env)
    job_ids = insert_jobs(engine, jobs, status="running")
    engine.dispose()
    with running(env, api_workers=2) as service, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "jobs.json"
        path.write_text(json.dumps(job_ids))
        argv = [sys.executable, "-m", __name__, service.url, service.api_key, str(path)]
        argv += ["--per-job", str(per_job), "--seconds", str(seconds)]
        api = service.processes["api"].pid
        cpu_before = group_cpu_seconds(api)
        subscribers = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        stop = threading.Event()
        writer = threading.Thread(target=write_epochs, args=(env, job_ids, 0.5, stop))
        writer.start()
        out, _ = subscribers.communicate(timeout=seconds + 60)
        cpu = group_cpu_seconds(api) - cpu_before
        stop.set()
        writer.join()
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["api_cpu_us_per_event"] = cpu * 1e6 / max(result["events"], 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("key")
    parser.add_argument("jobs", type=Path)
    parser.add_argument("--per-job", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    jobs = json.loads(args.jobs.read_text())
    result = asyncio.run(subscribe(args.url, args.key, jobs, args.per_job, args.seconds))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
