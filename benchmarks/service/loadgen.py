"""A load generator, run as its own process: N clients polling GET paths over loopback.

`python -m benchmarks.service.loadgen URL KEY PATHS.json --clients 200 --rate 1 --seconds 20`
prints one JSON object: requests, errors, latency percentiles (ms) and requests per second.
Each client polls at `rate` requests/s (an open loop, as real pollers do); `--rate 0` means
back to back (a closed loop, to find the saturation throughput).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path

import httpx


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[index]


async def client_loop(
    http: httpx.AsyncClient,
    paths: list[str],
    rate: float,
    stop_at: float,
    latencies: list[float],
    errors: list[int],
    seed: int,
) -> None:
    rng = random.Random(seed)
    interval = 1.0 / rate if rate > 0 else 0.0
    next_at = time.perf_counter() + rng.random() * interval  # spread the clients out
    while True:
        if interval:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += interval
        started = time.perf_counter()
        if started >= stop_at:
            return
        try:
            response = await http.get(rng.choice(paths))
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        latencies.append((time.perf_counter() - started) * 1000)
        if not ok:
            errors.append(1)


async def run(
    url: str, key: str, paths: list[str], clients: int, rate: float, seconds: float
) -> dict[str, float]:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {key}"}
    latencies: list[float] = []
    errors: list[int] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as http:
        await http.get(paths[0])  # warm one connection
        started = time.perf_counter()
        stop_at = started + seconds
        await asyncio.gather(
            *(client_loop(http, paths, rate, stop_at, latencies, errors, i) for i in range(clients))
        )
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "errors": len(errors),
        "rps": len(ordered) / elapsed,
        "p50_ms": percentile(ordered, 50),
        "p90_ms": percentile(ordered, 90),
        "p99_ms": percentile(ordered, 99),
        "max_ms": ordered[-1] if ordered else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("key")
    parser.add_argument("paths", type=Path)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument(
        "--rate", type=float, default=1.0, help="polls per second per client; 0 = closed loop"
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    paths = json.loads(args.paths.read_text())
    print(
        json.dumps(
            asyncio.run(run(args.url, args.key, paths, args.clients, args.rate, args.seconds))
        )
    )


if __name__ == "__main__":
    main()
