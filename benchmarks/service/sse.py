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
from urllib.parse import urlsplit

import uvloop
from sqlalchemy import insert

from app.domain.tables import EpochMetric
from benchmarks.service.cpu import group_cpu_seconds
from benchmarks.service.loadgen import percentile
from benchmarks.service.seed import insert_jobs
from benchmarks.service.stack import engine_for, running


async def follow(
    url: str,
    key: str,
    job_id: str,
    stop_at: float,
    out: dict[str, list[Any]],
) -> None:
    """One subscriber: read the stream, note each epoch's lag, stop at stop_at.

    A bare HTTP/1.1 reader (as benchmarks.service.loadgen): 200 httpx streams in one process
    spent tens of milliseconds parsing each burst of events, which the lag then showed. Lines
    are read as they come; the chunked framing's size lines never start with a field name."""
    parts = urlsplit(url)
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    except OSError as exc:
        out["errors"].append(f"connect: {exc}")
        return
    try:
        request = f"GET /v1/jobs/{job_id}/events HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        writer.write(f"{request}Authorization: Bearer {key}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if head.split(b" ", 2)[1] != b"200":
            out["errors"].append(head.split(b"\r\n", 1)[0].decode())
            return
        out["ready"].append(1)
        kind = b""
        while time.time() < stop_at:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"event:"):
                kind = line[6:].strip()
            elif line.startswith(b"data:") and kind == b"epoch":
                data = json.loads(line[5:])
                recorded = datetime.fromisoformat(data["recorded_at"])
                if recorded.tzinfo is None:
                    recorded = recorded.replace(tzinfo=UTC)
                now = datetime.now(UTC)
                out["lags"].append((now - recorded).total_seconds() * 1000)
                out["epochs"].append((data["epoch"], out["lags"][-1]))
                out["received"].append(now.timestamp())
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        out["errors"].append(f"{type(exc).__name__}: {str(exc)[:80]}")
    finally:
        writer.close()


async def subscribe(url: str, key: str, jobs: list[str], per_job: int, seconds: float) -> dict:  # type: ignore[type-arg]
    out: dict[str, list[Any]] = {
        "lags": [],
        "received": [],
        "ready": [],
        "errors": [],
        "epochs": [],
    }
    stop_at = time.time() + seconds
    tasks = [follow(url, key, job, stop_at, out) for job in jobs for _ in range(per_job)]
    joined = time.perf_counter()
    announce = asyncio.ensure_future(say_when_joined(out, len(tasks), joined))
    try:  # a stream that went quiet must not hold the result back
        await asyncio.wait_for(asyncio.gather(*tasks), seconds + 10)
    except TimeoutError:
        pass
    announce.cancel()
    ordered, received, errors = sorted(out["lags"]), out["received"], out["errors"]
    return {
        "subscribers": len(out["ready"]),
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "events": len(ordered),
        # over the time events flowed (the writer starts 2 s after the subscribers)
        "events_per_s": len(ordered) / max(max(received) - min(received), 1e-9) if ordered else 0.0,
        "lag_p50_ms": percentile(ordered, 50),
        "lag_p99_ms": percentile(ordered, 99),
        "worst_lag_ms_by_epoch": worst_by_epoch(out["epochs"]),
    }


async def say_when_joined(out: dict[str, list[Any]], total: int, since: float) -> None:
    """Print JOINED once every stream has its answer, so the writer starts on a steady state
    (joining 200 streams costs the API a key check and a job lookup each)."""
    while len(out["ready"]) + len(out["errors"]) < total:
        await asyncio.sleep(0.05)
    print(f"JOINED {time.perf_counter() - since:.3f}", flush=True)


def worst_by_epoch(lags: list[tuple[int, float]]) -> dict[int, float]:
    """The slowest delivery of each round of rows: is the tail one burst or every one?"""
    worst: dict[int, float] = {}
    for epoch, lag in lags:
        worst[epoch] = max(worst.get(epoch, 0.0), round(lag, 1))
    return dict(sorted(worst.items()))


def write_epochs(
    env: dict[str, str], jobs: list[str], interval: float, stop: threading.Event
) -> None:
    """One epoch row per job every `interval` seconds, each batch in its own transaction."""
    engine = engine_for(env)
    epoch = 0
    while not stop.wait(interval if epoch else 1.0):  # a second after every stream joined
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
        subscribers = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        joined = subscribers.stdout.readline() if subscribers.stdout else ""
        cpu_before = group_cpu_seconds(api)  # streaming only: joining is reported as join_s
        stop = threading.Event()
        writer = threading.Thread(target=write_epochs, args=(env, job_ids, 0.5, stop))
        writer.start()
        out, _ = subscribers.communicate(timeout=seconds + 60)
        cpu = group_cpu_seconds(api) - cpu_before
        stop.set()
        writer.join()
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["join_s"] = float(joined.split()[1]) if joined.startswith("JOINED") else float("nan")
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
    result = uvloop.run(subscribe(args.url, args.key, jobs, args.per_job, args.seconds))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
