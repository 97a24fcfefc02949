"""A live event stream ends soon after its key is revoked (checked at open only, it
outlived the revocation), and one key holds at most EPOCHAL_MAX_STREAMS_PER_KEY streams open
per API process (there was no bound). In-process, on both databases."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.api.stream_guard import STREAMS
from app.core.config import get_settings
from app.core.db import session_scope
from app.domain.tables import ApiKey, utcnow
from tests import hostile
from tests.conftest import make_key
from tests.helpers import scaled, wait_until

LIMIT = 2


@pytest.fixture
def client(db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("EPOCHAL_MAX_STREAMS_PER_KEY", str(LIMIT))
    get_settings.cache_clear()
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


class Stream:
    """One GET of a job's events in a thread; the test client answers once the stream ends."""

    def __init__(self, client: TestClient, key: str, job_id: str) -> None:
        self.response: httpx.Response | None = None
        self.ended_at = 0.0
        headers = {"Authorization": f"Bearer {key}"}

        def run() -> None:
            self.response = client.get(f"/v1/jobs/{job_id}/events", headers=headers)
            self.ended_at = time.monotonic()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def wait(self, seconds: float) -> httpx.Response:
        self.thread.join(scaled(seconds))
        assert self.response is not None, f"the stream was still open after {seconds} s"
        return self.response


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def key_id(key: str) -> str:
    return key.split("_")[1]


def revoke_elsewhere(key: str) -> float:
    """What `epochal keys revoke` does in another process: the row only, this process's key
    cache untouched (it learns of it when its cached row expires)."""
    with session_scope() as session:
        session.execute(update(ApiKey).where(ApiKey.id == key_id(key)).values(revoked_at=utcnow()))
    return time.monotonic()


def own_job(client: TestClient, key: str) -> str:
    created = client.post("/v1/jobs", json=hostile.BASE, headers={"Authorization": f"Bearer {key}"})
    assert created.status_code == 201, created.text
    job_id: str = created.json()["id"]
    return job_id  # stays queued: no worker, so its stream never ends by itself


def test_streams_are_bounded_per_key_and_end_soon_after_a_revocation(client: TestClient) -> None:
    alice, bob = make_key("alice"), make_key("bob")
    alices_job, bobs_job = own_job(client, alice), own_job(client, bob)
    streams = [Stream(client, alice, alices_job) for _ in range(LIMIT)]
    wait_until(lambda: STREAMS.open[key_id(alice)] == LIMIT, 30, "alice's streams open", 0.02)

    over = client.get(f"/v1/jobs/{alices_job}/events", headers={"Authorization": f"Bearer {alice}"})
    assert over.status_code == 429, over.text
    assert "EPOCHAL_MAX_STREAMS_PER_KEY" in over.json()["detail"]
    assert over.headers["retry-after"]
    bobs = Stream(client, bob, bobs_job)  # the bound is per key
    wait_until(lambda: STREAMS.open[key_id(bob)] == 1, 30, "bob's stream open", 0.02)

    revoked_at = revoke_elsewhere(alice)
    for stream in streams:
        response = stream.wait(15.0)  # a sanity bound; what it took is printed below
        assert response.status_code == 200
        assert "event: transition" in response.text  # it streamed before it was closed
    took = max(s.ended_at for s in streams) - revoked_at
    print(f"\nstreams closed {took:.2f} s after the key's revocation in another process")
    assert STREAMS.open[key_id(alice)] == 0
    assert STREAMS.open[key_id(bob)] == 1 and bobs.response is None  # untouched

    revoke_elsewhere(bob)
    assert bobs.wait(15.0).status_code == 200
    assert STREAMS.open[key_id(bob)] == 0
    again = client.get(
        f"/v1/jobs/{alices_job}/events", headers={"Authorization": f"Bearer {alice}"}
    )
    assert again.status_code == 401


def test_a_stream_that_ends_by_itself_gives_its_slot_back(client: TestClient) -> None:
    alice = make_key("alice")
    job_id = own_job(client, alice)
    auth = {"Authorization": f"Bearer {alice}"}
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=auth).status_code == 200
    for _ in range(LIMIT + 1):  # each ends at the terminal transition, its slot given back
        response = client.get(f"/v1/jobs/{job_id}/events", headers=auth)
        assert response.status_code == 200 and "cancelled" in response.text
    assert STREAMS.open[key_id(alice)] == 0
