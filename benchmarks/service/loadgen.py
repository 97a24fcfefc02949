"""A load generator, run as its own process: N clients polling GET paths over loopback.

`python -m benchmarks.service.loadgen URL KEY PATHS.json --clients 200 --rate 1 --seconds 20`
prints one JSON object: requests, errors, latency percentiles (ms), requests per second and the
generator's own CPU per request. Each client polls at `rate` requests/s (an open loop, as real
pollers do); `--rate 0` means back to back (a closed loop, to find the saturation throughput).

Each client is one keep-alive HTTP/1.1 connection driven by a minimal asyncio client on uvloop:
on a 2-core box the generator shares the CPU with the service, and httpx cost 2-7 ms of CPU
per request here, as much as the API it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from urllib.parse import urlsplit

import uvloop


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[index]


class Connection:
    """One keep-alive HTTP/1.1 connection that sends GETs and reads whole responses."""

    def __init__(self, url: str, key: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = f"Host: {parts.netloc}\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        try:
            self.writer.write(b"GET " + path.encode() + b" HTTP/1.1\r\n" + self.head)
            head = await self.reader.readuntil(b"\r\n\r\n")
            status, length, chunked, close = self._parse(head)
            body = await (self._chunks() if chunked else self.reader.readexactly(length))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            self.close()
            raise
        if close:
            self.close()
        return status, body

    @staticmethod
    def _parse(head: bytes) -> tuple[int, int, bool, bool]:
        lines = head.decode("latin-1").split("\r\n")
        status, length, chunked, close = int(lines[0].split(" ", 2)[1]), 0, False, False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                chunked = "chunked" in value
            elif name == "connection":
                close = value == "close"
        return status, length, chunked, close

    async def _chunks(self) -> bytes:
        assert self.reader is not None
        body = b""
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            body += await self.reader.readexactly(size + 2)
            if size == 0:
                return body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def client_loop(
    connection: Connection,
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
            connection.close()
            return
        try:
            status, _ = await connection.get(rng.choice(paths))
            ok = status == 200
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            ok = False
        latencies.append((time.perf_counter() - started) * 1000)
        if not ok:
            errors.append(1)


async def run(
    url: str, key: str, paths: list[str], clients: int, rate: float, seconds: float
) -> dict[str, float]:
    latencies: list[float] = []
    errors: list[int] = []
    keys = key.split(",")  # several: client i sends keys[i % len(keys)]
    connections = [Connection(url, keys[i % len(keys)]) for i in range(clients)]
    await connections[0].get(paths[0])  # warm one connection
    started, cpu_started = time.perf_counter(), time.process_time()
    stop_at = started + seconds
    await asyncio.gather(
        *(
            client_loop(connection, paths, rate, stop_at, latencies, errors, i)
            for i, connection in enumerate(connections)
        )
    )
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "errors": len(errors),
        "rps": len(ordered) / elapsed,
        "p50_ms": percentile(ordered, 50),
        "p90_ms": percentile(ordered, 90),
        "p99_ms": percentile(ordered, 99),
        "max_ms": ordered[-1] if ordered else float("nan"),
        "client_cpu_us_per_request": cpu * 1e6 / max(len(ordered), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("key", help="an API key, or several joined by commas (one per client)")
    parser.add_argument("paths", type=Path)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument(
        "--rate", type=float, default=1.0, help="polls per second per client; 0 = closed loop"
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    paths = json.loads(args.paths.read_text())
    result = uvloop.run(run(args.url, args.key, paths, args.clients, args.rate, args.seconds))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
