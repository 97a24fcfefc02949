"""API keys: every /v1 route needs one; a key sees only its own jobs; admin sees all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.db import session_scope
from app.models import ApiKey
from app.security import revoke, verify
from tests.conftest import make_key

BODY = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}


@pytest.fixture
def app_client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield client


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/v1/jobs"),
        ("post", "/v1/jobs"),
        ("get", "/v1/jobs/x"),
        ("get", "/v1/jobs/x/metrics"),
        ("post", "/v1/jobs/x/cancel"),
    ],
)
def test_no_or_wrong_key_is_401(app_client: TestClient, method: str, path: str) -> None:
    for headers in (
        {},
        auth("ep_000000000000_wrong"),
        auth("garbage"),
        {"Authorization": "Basic eA=="},
    ):
        response = app_client.request(method, path, headers=headers, json=BODY)
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["www-authenticate"] == "Bearer"


def test_health_needs_no_key(app_client: TestClient) -> None:
    assert app_client.get("/healthz").status_code == 200
    assert app_client.get("/readyz").status_code == 200


def test_keys_see_only_their_own_jobs_and_admin_sees_all(app_client: TestClient) -> None:
    alice, bob, admin = make_key("alice"), make_key("bob"), make_key("ops", admin=True)
    job = app_client.post("/v1/jobs", json=BODY, headers=auth(alice)).json()
    assert app_client.get(f"/v1/jobs/{job['id']}", headers=auth(bob)).status_code == 404
    assert app_client.get(f"/v1/jobs/{job['id']}/metrics", headers=auth(bob)).status_code == 404
    assert app_client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(bob)).status_code == 404
    assert app_client.get("/v1/jobs", headers=auth(bob)).json()["items"] == []
    assert [j["id"] for j in app_client.get("/v1/jobs", headers=auth(admin)).json()["items"]] == [
        job["id"]
    ]
    assert app_client.get(f"/v1/jobs/{job['id']}", headers=auth(admin)).status_code == 200
    assert app_client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(admin)).status_code == 200


def test_revoked_key_is_401_and_only_a_hash_is_stored(app_client: TestClient) -> None:
    key = make_key("temp")
    assert app_client.get("/v1/jobs", headers=auth(key)).status_code == 200
    key_id, secret = key.split("_")[1], key.split("_")[2]
    with session_scope() as session:
        row = session.get(ApiKey, key_id)
        assert row is not None and secret not in row.secret_hash and len(row.secret_hash) == 64
        assert verify(session, key) is not None
        assert revoke(session, key_id)
    assert app_client.get("/v1/jobs", headers=auth(key)).status_code == 401


def test_idempotent_submit(app_client: TestClient) -> None:
    key = make_key("retrying-client")
    headers = {**auth(key), "Idempotency-Key": "order-42"}
    first = app_client.post("/v1/jobs", json=BODY, headers=headers)
    again = app_client.post("/v1/jobs", json=BODY, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = app_client.post("/v1/jobs", json={**BODY, "name": "different"}, headers=headers)
    assert other.status_code == 409
    other_key = app_client.post(
        "/v1/jobs", json=BODY, headers={**auth(make_key("x")), "Idempotency-Key": "order-42"}
    )
    assert other_key.status_code == 201 and other_key.json()["id"] != first.json()["id"]
    assert len(app_client.get("/v1/jobs", headers=auth(key)).json()["items"]) == 1


def test_per_key_quota(app_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.config import get_settings

    monkeypatch.setattr(get_settings(), "max_active_jobs_per_key", 2)
    key = make_key("busy")
    codes = [
        app_client.post("/v1/jobs", json=BODY, headers=auth(key)).status_code for _ in range(3)
    ]
    assert codes == [201, 201, 429]
    first = app_client.get("/v1/jobs", headers=auth(key)).json()["items"][0]["id"]
    app_client.post(f"/v1/jobs/{first}/cancel", headers=auth(key))
    assert app_client.post("/v1/jobs", json=BODY, headers=auth(key)).status_code == 201
