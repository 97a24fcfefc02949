"""Hand-written hostile requests: every one gets a 4xx problem, never a 500 or a traceback.

Run on SQLite and on PostgreSQL, whose stricter types (no NUL in text, no NaN in JSON) are
where a lax check turns into a 500.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

BASE: dict[str, Any] = {"framework": "pytorch", "dataset": {"name": "digits"}}


def with_(path: str, value: Any) -> dict[str, Any]:
    """BASE with one nested field set: with_("training.epochs", 0)."""
    body = json.loads(json.dumps(BASE))
    *parents, leaf = path.split(".")
    node = body
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return body


NASTY_SPECS: list[Any] = [
    with_("training.epochs", "ten"),  # wrong types
    with_("training.epochs", [1]),
    with_("training.batch_size", 1.5),
    with_("framework", 7),
    with_("dataset", "digits"),
    with_("model", []),
    with_("tags", ["a"]),
    with_("training.epochs", 10**30),  # huge numbers
    with_("training.seed", -(2**70)),
    with_("optimizer.learning_rate", 1e308),
    with_("max_runtime_seconds", 10**100),
    with_("model.hidden_units", [10**9]),
    with_("model.hidden_units", [8192] * 16),  # every layer legal, the total is not
    with_("optimizer.learning_rate", "NaN"),  # NaN and Infinity as strings
    with_("optimizer.learning_rate", "Infinity"),
    with_("regularization.l2", "-Infinity"),
    with_("early_stopping", {"baseline": "NaN"}),
    with_("early_stopping", {"min_delta": "nan"}),
    with_("lr_scheduler", {"name": "reduce_on_plateau", "min_delta": "inf"}),
    with_("lr_scheduler", {"name": "cosine", "min_lr": "NaN"}),
    with_("dataset.validation_split", "nan"),
    with_("tags", {f"k{i}": "v" for i in range(1000)}),  # huge tags
    with_("tags", {"k" * 10_000: "v"}),
    with_("tags", {"team": "v" * 100_000}),
    with_("tags", {"bad key!": "v"}),
    with_("dataset", {"name": "../../etc/passwd"}),  # path-like data sets
    with_("dataset", {"id": "../../etc/passwd"}),
    with_("dataset", {"id": "/etc/passwd"}),
    with_("dataset", {"id": "http://169.254.169.254/latest"}),
    with_("dataset", {"id": "a\u0000b"}),
    with_("dataset", {"name": "digits", "path": "/etc/passwd"}),
    with_("name", "x\u0000y"),  # unicode and control characters
    with_("name", "💥" * 200),
    with_("name", "a/../../b"),
    with_("unknown_field", 1),
    with_("model", {"type": "graph", "layers": [{"name": "a\u0000", "op": "flatten"}]}),
    with_("model", {"type": "graph", "layers": [{"name": "d", "op": "dropout", "rate": "NaN"}]}),
    with_("model", {"type": "graph", "layers": [{"name": "r", "op": "reshape", "shape": [2**62]}]}),
    {"framework": "pytorch"},  # missing the data set
    {},
]

RAW_BODIES: list[bytes] = [
    b"[" * 100_000 + b"]" * 100_000,  # deep nesting (within the body limit)
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b'{"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1e400}}',
    b'{"framework": "pytorch", "dataset": {"name": "digits"}, "max_restarts": -Infinity}',
    b"\xff\xfe\x00garbage",
    b'{"framework": "pytorch", "framework": "tensorflow"',
    b"",
    b'{"framework": "pytorch", "dataset": {"name": "digits"}, "name": "\\ud800"}',
    b'{"framework": "pytorch", "dataset": {"name": "digits"}, "tags": {"a": "\\udfff"}}',
    b'{"framework": "pytorch", "dataset": {"name": "digits"}, "tags": {"\\ud800": "a"}}',
]

# Lax but harmless: accepted (true is 1 epoch, a NUL is just a character in a tag), or
# refused; either way never a 500, and the stored job reads back.
ODD_BUT_VALID: list[Any] = [
    with_("training.epochs", True),
    with_("tags", {"nul": "a\u0000b"}),
    with_("name", "Ünïcödé ñame"),
]


@pytest.fixture
def client(db_env: dict[str, str], api_key: str) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {api_key}"
        yield test_client


def assert_problem(response: Any, allowed: tuple[int, ...] = (400, 404, 405, 413, 422)) -> None:
    assert response.status_code in allowed, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "Traceback" not in response.text


@pytest.mark.parametrize("body", NASTY_SPECS, ids=range(len(NASTY_SPECS)))
def test_nasty_specs_are_4xx(client: TestClient, body: Any) -> None:
    assert_problem(client.post("/v1/jobs", json=body))


@pytest.mark.parametrize("body", ODD_BUT_VALID, ids=range(len(ODD_BUT_VALID)))
def test_odd_specs_never_break_the_server(client: TestClient, body: Any) -> None:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code in (201, 422), response.text[:300]
    if response.status_code == 201:
        job_id = response.json()["id"]
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
        assert client.get("/v1/jobs").status_code == 200


@pytest.mark.parametrize("raw", RAW_BODIES, ids=range(len(RAW_BODIES)))
def test_nasty_raw_bodies_are_4xx(client: TestClient, raw: bytes) -> None:
    response = client.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
    assert_problem(response)


def test_oversize_body_is_413(client: TestClient) -> None:
    big = json.dumps(with_("name", "x" * 3_000_000)).encode()
    assert_problem(
        client.post("/v1/jobs", content=big, headers={"content-type": "application/json"}),
        allowed=(413,),
    )


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs/..%2F..%2Fetc%2Fpasswd",
        "/v1/jobs/%00",
        "/v1/jobs/" + "a" * 5000,
        "/v1/jobs/%F0%9F%92%A5/metrics",
        "/v1/jobs/x/logs?tail=-1",
        "/v1/jobs/x/logs?tail=99999999999999999999",
        "/v1/jobs?limit=0",
        "/v1/jobs?limit=NaN",
        "/v1/jobs?cursor=%00",
        "/v1/jobs?status=%00",
        "/v1/jobs?framework=../x",
    ],
)
def test_nasty_paths_and_queries_are_4xx(client: TestClient, path: str) -> None:
    assert_problem(client.get(path))


@pytest.mark.parametrize(
    "header",
    [
        "Bearer ep_\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00_x",
        "Bearer " + "a" * 10_000,
        "Basic x",
    ],
)
def test_nasty_keys_are_401(client: TestClient, header: str) -> None:
    response = client.get("/v1/jobs", headers={"Authorization": header})
    assert_problem(response, allowed=(401,))


def test_nasty_idempotency_keys_are_4xx(client: TestClient) -> None:
    response = client.post("/v1/jobs", json=BASE, headers={"Idempotency-Key": "k" * 300})
    assert_problem(response)


def cursor_of(created: str, job_id: str) -> str:
    """A cursor in this API's format, holding whatever id the caller likes."""
    raw = json.dumps([created, job_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("route", ["/v1/jobs", "/v1/sweeps"])
@pytest.mark.parametrize(
    "cursor",
    [
        cursor_of("2030-01-01T00:00:00+00:00", "a\u0000"),  # PostgreSQL refuses the NUL
        cursor_of("2030-01-01T00:00:00+00:00", "\ud800"),  # a lone surrogate cannot be encoded
        cursor_of("2030-01-01T00:00:00", "a"),  # no time zone
        cursor_of("2030-01-01T00:00:00+00:00", "a" * 65),
        base64.urlsafe_b64encode(b'["2030-01-01T00:00:00+00:00", 7]').decode(),
    ],
)
def test_forged_cursors_are_422(client: TestClient, route: str, cursor: str) -> None:
    assert_problem(client.get(f"{route}?cursor={cursor}"), allowed=(422,))


# Percent-encoded values no route may turn into a 5xx: refused ones must be a 4xx problem on
# every path and query parameter; odd but legal ones may be served or refused.
REFUSED = ["%00", "a%00b", "%0D%0AX-Injected:%201", "%1B%5B2J", "%7F", "%C2%85", "%ED%A0%80"]
REFUSED += ["%FF%FE", "%EF%BF%BF", "%F4%8F%BF%BF", "a" * 9000]
ODD = ["%F0%9F%92%A5", "%E2%80%AE", "%EF%BB%BF", "..%2F..%2Fetc", "a" * 5000, "%20", "-"]
SOME_ID = "00000000-0000-0000-0000-000000000000"


def api_routes() -> list[tuple[str, str, list[str], list[str]]]:
    """(method, path template, path params, query params) of every route the app documents."""
    from app.main import create_app

    out = []
    for template, operations in create_app().openapi()["paths"].items():
        for method, operation in operations.items():
            params = operation.get("parameters", [])
            path_params = [p["name"] for p in params if p["in"] == "path"]
            query_params = [p["name"] for p in params if p["in"] == "query"] + ["zz"]  # unknown
            out.append((method.upper(), template, path_params, query_params))
    return out


ROUTES = api_routes()


def hostile_urls(
    template: str, path_params: list[str], query_params: list[str], value: str
) -> Iterator[str]:
    """The route's URL with `value` in each of its parameters in turn."""
    filled = dict.fromkeys(path_params, SOME_ID)
    for name in path_params:
        yield template.format(**(filled | {name: value}))
    for name in query_params:
        yield f"{template.format(**filled)}?{name}={value}"


@pytest.mark.parametrize("route", ROUTES, ids=[f"{m} {p}" for m, p, *_ in ROUTES])
def test_every_parameter_of_every_route_refuses_hostile_values(
    client: TestClient, route: tuple[str, str, list[str], list[str]]
) -> None:
    method, template, path_params, query_params = route
    assert len(ROUTES) > 20  # the enumeration found the app's routes
    for value in REFUSED:
        for url in hostile_urls(template, path_params, query_params, value):
            response = client.request(method, url)
            assert 400 <= response.status_code < 500, (url, response.status_code)
            assert response.headers["content-type"].startswith("application/problem+json"), url
    for value in ODD:
        for url in hostile_urls(template, path_params, query_params, value):
            response = client.request(method, url)
            assert response.status_code < 500, (url, response.status_code, response.text[:200])


def test_access_log_escapes_cr_lf(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="epochal.access"):
        assert client.get("/v1/jobs/a%0D%0A127.0.0.1%20-%20forged").status_code == 400
    lines = [r.getMessage() for r in caplog.records if r.name == "epochal.access"]
    assert any("forged" in line for line in lines)
    assert not any("\r" in line or "\n" in line for line in lines), lines
