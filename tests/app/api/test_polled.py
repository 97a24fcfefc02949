"""The polled routes' fast path (app.api.polled): a plainly valid metrics poll or job list is
answered without FastAPI's routing, with the bytes and headers the route gives; anything else
goes on to the route and gets its usual answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.db import session_scope
from app.domain import crud, epoch_rows
from app.domain.keys import KEYS
from app.domain.tables import ApiKey, utcnow
from tests.conftest import make_key
from tests.helpers import VIA_ROUTE

BODY = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 4}}


@pytest.fixture
def client(db_env: dict[str, str], answered: list[bool]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('poller')}"
        yield test_client


def jobs_with_rows(client: TestClient) -> list[str]:
    ids = [
        client.post("/v1/jobs", json={**BODY, "tags": {"n": str(n)}}).json()["id"]
        for n in (0, 1, 2)
    ]
    with session_scope() as session:
        assert crud.claim_job(session, ids[1], "w", 30) is not None
    with session_scope() as session:
        for n, loss in ((1, 0.5), (2, float("nan")), (3, 1e-7)):
            logs = {"train_loss": loss, "val_accuracy": 1 / 3, "epoch_seconds": 12.25}
            epoch_rows.record_epoch(session, ids[1], 1, n, logs, best=(n, 1 / 3))
    return ids


def test_valid_polls_are_answered_here_with_the_routes_bytes_and_headers(
    client: TestClient, answered: list[bool]
) -> None:
    ids = jobs_with_rows(client)
    cursor = client.get("/v1/jobs?limit=2").json()["next_cursor"]
    targets = [
        f"/v1/jobs/{ids[1]}/metrics",
        f"/v1/jobs/{ids[1]}/metrics?since_epoch=1",
        f"/v1/jobs/{ids[1]}/metrics?since_epoch=1&limit=1",
        f"/v1/jobs/{ids[0]}/metrics?since_epoch=0",  # a job with no rows yet
        "/v1/jobs",
        "/v1/jobs?status=running",
        "/v1/jobs?status=queued&framework=pytorch&limit=1",
        f"/v1/jobs?limit=2&cursor={cursor}",
        f"/v1/jobs?sweep_id={ids[0]}",
        "/v1/jobs?unknown=ignored",
    ]
    for target in targets:
        answered.clear()
        fast = client.get(target)
        assert answered == [True], target
        answered.clear()
        slow = client.get(target + ("&" if "?" in target else "?") + VIA_ROUTE)
        assert answered == [False], target
        assert fast.status_code == slow.status_code == 200, target
        assert fast.content == slow.content, target
        assert fast.headers == slow.headers, target
    assert client.get(f"/v1/jobs/{ids[1]}/metrics?since_epoch=1").json()["items"][0]["epoch"] == 2


@pytest.mark.parametrize(
    ("target", "status", "names"),
    [
        ("/v1/jobs/{job}/metrics?since_epoch=-1", 422, "since_epoch"),
        ("/v1/jobs/{job}/metrics?since_epoch=1000001", 422, "since_epoch"),
        ("/v1/jobs/{job}/metrics?limit=0", 422, "limit"),
        ("/v1/jobs/{job}/metrics?limit=x", 422, "limit"),
        ("/v1/jobs?limit=501", 422, "limit"),
        ("/v1/jobs?status=lost", 422, "status"),
        ("/v1/jobs?framework=jax", 422, "framework"),
        ("/v1/jobs?cursor=bm90LWEtY3Vyc29y", 422, "cursor"),
        ("/v1/jobs/00000000-0000-0000-0000-000000000000/metrics", 404, "no job"),
    ],
)
def test_anything_else_gets_the_routes_own_answer(
    client: TestClient, answered: list[bool], target: str, status: int, names: str
) -> None:
    job = client.post("/v1/jobs", json=BODY).json()["id"]
    client.get("/v1/jobs")  # the key is in the cache: only the request itself can be refused
    answered.clear()
    response = client.get(target.format(job=job))
    assert answered == [False]
    assert response.status_code == status
    assert names in response.text
    assert response.headers["content-type"] == "application/problem+json"


def test_keys_are_checked_as_the_route_checks_them(
    client: TestClient, answered: list[bool]
) -> None:
    job = client.post("/v1/jobs", json=BODY).json()["id"]
    other = {"Authorization": f"Bearer {make_key('someone-else')}"}
    for _ in range(2):  # the second time the other key is in the cache
        assert client.get(f"/v1/jobs/{job}/metrics", headers=other).status_code == 404
        assert client.get("/v1/jobs", headers=other).json()["items"] == []
    assert answered[-1] is True  # an empty page of its own jobs is a valid answer
    answered.clear()
    for headers in (
        {"Authorization": ""},
        {"Authorization": "Basic eDp5"},
        {"Authorization": "Bearer ep_x_y"},
    ):
        response = client.get(f"/v1/jobs/{job}/metrics", headers=headers)
        assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer"
    assert answered == [False, False, False]


def test_a_key_whose_cached_row_is_out_of_date_is_read_again_here(
    client: TestClient, answered: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(KEYS, "seconds", 0.0)  # every row is out of date as soon as it is read
    job = client.post("/v1/jobs", json=BODY).json()["id"]
    for _ in range(3):  # a poller's key, a second after the last read: not sent to the route
        assert client.get(f"/v1/jobs/{job}").status_code == 200
    assert answered == [True, True, True]
    fresh = {"Authorization": f"Bearer {make_key('never-seen')}"}
    assert client.get("/v1/jobs", headers=fresh).status_code == 200
    assert client.get("/v1/jobs", headers=fresh).status_code == 200
    assert answered[-2:] == [False, True]  # the route reads a key first; then it is known here
    key_id = client.headers["Authorization"].split("_")[1]
    with session_scope() as session:  # revoked by another process: this one is not told
        session.execute(update(ApiKey).where(ApiKey.id == key_id).values(revoked_at=utcnow()))
    assert client.get(f"/v1/jobs/{job}").status_code == 401
    assert answered[-1] is False


def test_requests_answered_here_are_counted_by_their_route(client: TestClient) -> None:
    job = client.post("/v1/jobs", json=BODY).json()["id"]
    for _ in range(3):
        assert client.get(f"/v1/jobs/{job}/metrics").status_code == 200
    scrape = client.get("/metrics").text
    assert 'route="/v1/jobs/{job_id}/metrics",status="200"' in scrape
    assert f"/v1/jobs/{job}/metrics" not in scrape  # never the raw path as a label
