"""More concurrent requests than connections + threads in one API process, on PostgreSQL.

A session keeps its connection between the thread-pool hops of a request's dependencies, so a
burst bigger than pool + threads used to deadlock until the pool's 30 s timeout: every
connection held by a request waiting for a thread, every thread waiting for a connection.
Live streams made it permanent. app.api.deps bounds the sessions in flight instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.helpers import Service, running_service, submit_job

pytestmark = pytest.mark.e2e
STREAMS = 120  # > 30 pooled connections + 40 threads of one API process


@pytest.fixture(scope="module")
def service(pg_service_env: dict[str, str]) -> Iterator[Service]:
    streams = {"EPOCHAL_MAX_STREAMS_PER_KEY": str(STREAMS)}  # all of one key
    with running_service(pg_service_env, worker=False, **streams) as svc:
        yield svc


async def first_events(service: Service, job_id: str, streams: int) -> list[float]:
    """Open `streams` SSE streams at once; seconds until each delivered its first event."""
    limits = httpx.Limits(max_connections=streams + 10)
    headers = {"Authorization": f"Bearer {service.api_key}"}
    timeout = httpx.Timeout(40.0)
    async with httpx.AsyncClient(
        base_url=service.url, headers=headers, limits=limits, timeout=timeout
    ) as http:
        started = time.monotonic()

        async def one() -> float:
            async with http.stream("GET", f"/v1/jobs/{job_id}/events") as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        return time.monotonic() - started
            raise AssertionError("stream ended without an event")

        async def poll() -> float:  # plain requests keep being served beside the streams
            await asyncio.sleep(1.0)
            response = await http.get(f"/v1/jobs/{job_id}/metrics")
            assert response.status_code == 200
            return time.monotonic() - started

        return list(await asyncio.gather(*[one() for _ in range(streams)], poll()))


def test_a_burst_of_streams_bigger_than_the_pool_is_served(service: Service) -> None:
    with service.client() as client:
        job = submit_job(client, dataset={"name": "digits"})  # stays queued: no worker
    waited = asyncio.run(first_events(service, job["id"], STREAMS))
    assert len(waited) == STREAMS + 1
    assert max(waited) < 20, f"slowest first event after {max(waited):.1f} s"
