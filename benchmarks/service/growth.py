"""How read cost grows: metrics reads vs rows in the table (10k -> 1M) and the job list vs jobs
(1k -> 100k), one client, median of many requests; the slope is ms per 10x more rows."""

from __future__ import annotations

import math
import statistics
import time
from datetime import timedelta
from types import SimpleNamespace

import httpx

from app.domain.paging import encode_cursor
from benchmarks.service.seed import BASE_TIME, insert_jobs, insert_metrics
from benchmarks.service.stack import engine_for, running


def median_ms(client: httpx.Client, paths: list[str], repeat: int = 300) -> float:
    times = []
    for i in range(repeat):
        started = time.perf_counter()
        response = client.get(paths[i % len(paths)])
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
    return statistics.median(times)


def slope_per_decade(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of milliseconds against log10(rows)."""
    xs = [math.log10(n) for n, _ in points]
    ys = [ms for _, ms in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def metrics_growth(
    env: dict[str, str], steps: tuple[int, ...] = (10, 100, 1000), epochs: int = 1000
) -> list[tuple[int, float]]:
    engine, points, jobs = engine_for(env), [], []
    with running(env) as service, service.client() as client:
        for target in steps:
            new = insert_jobs(engine, target - len(jobs), start=len(jobs))
            insert_metrics(engine, new, epochs)
            jobs += new
            paths = [
                f"/v1/jobs/{jobs[i * 7 % len(jobs)]}/metrics?since_epoch={epochs - 5}"
                for i in range(50)
            ]
            points.append((len(jobs) * epochs, median_ms(client, paths)))
    engine.dispose()
    return points


def list_growth(
    env: dict[str, str], steps: tuple[int, ...] = (1000, 10_000, 100_000)
) -> list[tuple[int, float]]:
    engine, points, count = engine_for(env), [], 0
    with running(env) as service, service.client() as client:
        for target in steps:
            insert_jobs(engine, target - count, start=count)
            count = target
            middle = SimpleNamespace(
                created_at=BASE_TIME + timedelta(seconds=count // 2),
                id="00000000-0000-0000-0000-000000000000",
            )
            paths = ["/v1/jobs?limit=50", f"/v1/jobs?limit=50&cursor={encode_cursor(middle)}"]  # type: ignore[arg-type]
            points.append((count, median_ms(client, paths)))
    engine.dispose()
    return points
