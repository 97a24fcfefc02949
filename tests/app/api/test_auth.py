"""API keys: every /v1 route needs one; a key sees only its own jobs; admin sees all."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.db import session_scope
from app.domain.keys import revoke, verify
from app.domain.tables import ApiKey
from tests.conftest import make_key

BODY = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}


@pytest.fixture
def app_client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield client


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


DUMMY_ID = "00000000-0000-4000-8000-000000000000"


def v1_routes() -> list[tuple[str, str]]:
    """(method, path) of every /v1 route the app serves, path parameters filled with a UUID."""
    from app.main import create_app

    routes: Sequence[Any] = create_app().routes
    try:  # FastAPI >= 0.16x includes routers lazily; flatten them as the app does
        from fastapi.routing import iter_route_contexts

        routes = list(iter_route_contexts(routes))
    except ImportError:
        pass
    found = set()
    for route in routes:
        path = getattr(route, "path", None) or ""
        for method in getattr(route, "methods", None) or ():
            if path.startswith("/v1"):
                found.add((method.lower(), re.sub(r"\{[^}]+\}", DUMMY_ID, path)))
    return sorted(found)


V1_ROUTES = v1_routes()


def test_the_route_list_is_complete() -> None:
    """The list below is read from the app; if reading it broke, this fails instead of 0 tests."""
    assert len(V1_ROUTES) >= 14
    assert {("post", "/v1/jobs"), ("delete", f"/v1/datasets/{DUMMY_ID}")} <= set(V1_ROUTES)
    assert ("get", f"/v1/jobs/{DUMMY_ID}/events") in V1_ROUTES


@pytest.mark.parametrize(("method", "path"), V1_ROUTES)
def test_no_or_wrong_key_is_401(app_client: TestClient, method: str, path: str) -> None:
    for headers in (
        {},
        auth("ep_000000000000_wrong"),
        auth("garbage"),
        {"Authorization": "Basic eA=="},
    ):
        for body in (None, BODY):  # no body must not turn into a 422 before the key is checked
            response = app_client.request(method, path, headers=headers, json=body)
            assert response.status_code == 401, (headers, body, response.text)
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
    _, key_id, secret = key.split("_", 2)  # the secret itself may contain "_"
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
    from app.core.config import get_settings

    monkeypatch.setattr(get_settings(), "max_active_jobs_per_key", 2)
    key = make_key("busy")
    codes = [
        app_client.post("/v1/jobs", json=BODY, headers=auth(key)).status_code for _ in range(3)
    ]
    assert codes == [201, 201, 429]
    first = app_client.get("/v1/jobs", headers=auth(key)).json()["items"][0]["id"]
    app_client.post(f"/v1/jobs/{first}/cancel", headers=auth(key))
    assert app_client.post("/v1/jobs", json=BODY, headers=auth(key)).status_code == 201


def test_a_multi_node_job_counts_once_per_node_in_the_quota(
    app_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.core.config import get_settings

    monkeypatch.setattr(get_settings(), "max_active_jobs_per_key", 4)
    key = make_key("gangs")
    gang = {**BODY, "resources": {"nodes": 4}}
    assert app_client.post("/v1/jobs", json=gang, headers=auth(key)).status_code == 201
    one_more = app_client.post("/v1/jobs", json=BODY, headers=auth(key))
    assert one_more.status_code == 429, one_more.text  # the gang holds the key's 4 workers
    too_big = app_client.post(
        "/v1/jobs", json={**BODY, "resources": {"nodes": 8}}, headers=auth(make_key("x"))
    )
    assert too_big.status_code == 429
    assert "runs on 8 nodes and counts as 8 jobs" in too_big.json()["detail"]


def key_file_mode() -> int:
    from app.core.config import get_settings

    return stat.S_IMODE(get_settings().resolved_api_key_file.stat().st_mode)


def test_admin_key_bootstrap_reuses_a_live_key_and_replaces_a_revoked_one(
    db_env: dict[str, str],
) -> None:
    from app.cli import ensure_admin_key
    from app.core.config import get_settings

    first = ensure_admin_key()
    assert ensure_admin_key() == first  # a second `epochal up` keeps the key
    path = get_settings().resolved_api_key_file
    assert path.read_text().strip() == first and key_file_mode() == 0o600
    with session_scope() as session:
        row = verify(session, first)
        assert row is not None and row.is_admin
        assert revoke(session, row.id)
    # A revoked (say, leaked) key is not handed out again: the next `up` writes a new one.
    os.chmod(path, 0o644)  # e.g. a file a deploy tool created before the first `up`
    second = ensure_admin_key()
    assert second != first and path.read_text().strip() == second
    assert key_file_mode() == 0o600
    with session_scope() as session:
        row = verify(session, second)
        assert row is not None and row.is_admin
        assert verify(session, first) is None


def test_a_401_says_what_is_wrong_without_saying_which_keys_exist(
    app_client: TestClient,
) -> None:
    def detail(headers: dict[str, str]) -> str:
        response = app_client.get("/v1/jobs", headers=headers)
        assert response.status_code == 401
        return str(response.json()["detail"])

    assert detail({}).startswith("no API key sent: send the header Authorization: Bearer <key>")
    assert "epochal keys create" in detail({})
    for header in ("Basic eA==", "Bearer", "Bearer   ", "Token abc"):
        got = detail({"Authorization": header})
        assert got == "malformed Authorization header: expected `Bearer <key>`", header
    assert detail(auth("garbage")).startswith("malformed API key: epochal keys look like ep_")
    revoked = make_key("gone")
    with session_scope() as session:
        assert revoke(session, revoked.split("_")[1])
    live = make_key("live")
    wrong_secret = live.rsplit("_", 1)[0] + "_not-the-secret"
    answers = {detail(auth(k)) for k in ("ep_000000000000_none", revoked, wrong_secret)}
    assert len(answers) == 1  # unknown, revoked and a wrong secret read the same
    assert answers.pop().startswith("unknown or revoked API key; create one with")


def test_the_clients_401_names_the_key_it_sent_or_the_file_it_tried(
    app_client: TestClient, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epochal_client.client import ApiError, Client

    for name in ("EPOCHAL_API_KEY", "EPOCHAL_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EPOCHAL_HOME", str(tmp_path / "elsewhere"))
    key_file = tmp_path / "elsewhere" / "api-key"

    def refusal() -> str:
        with Client("http://testserver", transport=app_client._transport) as client:
            with pytest.raises(ApiError) as caught:
                client.list()
        assert caught.value.status == 401
        return str(caught.value)

    told = refusal()
    assert "no API key sent" in told and f"there is no key file {key_file}" in told
    assert "set EPOCHAL_API_KEY, or EPOCHAL_HOME" in told
    key_file.parent.mkdir()
    key_file.write_text("ep_000000000000_stale\n")
    told = refusal()
    assert "unknown or revoked API key" in told
    assert f"the key sent came from the key file {key_file}" in told
    monkeypatch.setenv("EPOCHAL_API_KEY", "ep_000000000000_other")
    assert "the key sent came from EPOCHAL_API_KEY" in refusal()
