"""The HTTP contract, in-process against a real SQLite database and filesystem broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.db import session_scope
from app.domain import crud, epoch_rows
from app.schemas.optimizers import OPTIMIZERS
from app.schemas.schedules import SCHEDULES


@pytest.fixture
def client(db_env: dict[str, str], api_key: str) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {api_key}"
        yield test_client


BODY = {
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "training": {"epochs": 3},
    "tags": {"team": "vision"},
}


def test_submit_returns_the_job_with_defaults_and_queues_it(
    client: TestClient, db_env: dict[str, str]
) -> None:
    response = client.post("/v1/jobs", json=BODY)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "queued" and job["attempt"] == 0 and job["epochs"] == 3
    assert job["spec"]["optimizer"] == {"name": "adam", "learning_rate": 0.001}  # its own fields
    assert job["transitions"][0]["to_status"] == "queued" and job["tags"] == {"team": "vision"}
    assert job["wait_reason"] == "waiting for a worker: none is live"
    with session_scope() as session:  # committed, and its message was published
        stored = crud.get_job(session, job["id"])
        assert stored is not None and stored.dispatched_at is not None
    if "EPOCHAL_BROKER_URL" not in db_env:
        queue = Path(db_env["EPOCHAL_HOME"]) / "broker" / "queue"
        assert any(job["id"] in p.read_text() for p in queue.iterdir())


def test_validation_errors_are_problem_json_naming_the_field(client: TestClient) -> None:
    response = client.post("/v1/jobs", json={**BODY, "training": {"epochs": 0}})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["status"] == 422 and "training.epochs" in problem["detail"]
    assert problem["errors"][0]["field"] == "training.epochs"
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    ("field", "body", "known"),
    [
        ("optimizer", {"name": "lamb"}, OPTIMIZERS),
        ("lr_scheduler", {"name": "one_cycle"}, SCHEDULES),
    ],
)
def test_an_unknown_optimizer_or_schedule_is_a_422_listing_the_known_ones(
    client: TestClient, field: str, body: dict[str, str], known: dict[str, object]
) -> None:
    response = client.post("/v1/jobs", json={**BODY, field: body})
    assert response.status_code == 422
    (error,) = response.json()["errors"]
    assert error["field"] == field and f"unknown {field} {body['name']!r}" in error["msg"]
    assert error["msg"].endswith("choose one of " + ", ".join(known))
    assert client.get("/v1/jobs").json()["items"] == []


@pytest.mark.parametrize("raw", [b"{", b"[]", b'"x"', b"null", b'{"framework": NaN}'])
def test_malformed_bodies_are_4xx(client: TestClient, raw: bytes) -> None:
    response = client.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422


def test_malformed_json_is_a_422_that_says_what_the_parser_expected(client: TestClient) -> None:
    raw = b'{"framework": "pytorch",\n "dataset": {"name": "digits"},, }'
    response = client.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422
    problem = response.json()
    msg = "the body is not valid JSON: Expecting property name enclosed in double quotes"
    assert problem["detail"] == f"body: {msg} at character {raw.index(b',,') + 1} of the body"
    assert problem["errors"] == [
        {"loc": ["body"], "field": "", "msg": problem["detail"][6:], "type": "json_invalid"}
    ]


@pytest.mark.parametrize(
    ("extra", "name"),
    [
        ({}, "val_loss"),
        ({"early_stopping": {"monitor": "val_accuracy"}}, "val_accuracy"),
        ({"early_stopping": {"monitor": "loss"}}, "train_loss"),
        ({"dataset": {"name": "digits", "validation_split": 0}}, "train_loss"),
    ],
)
def test_a_job_says_which_metric_its_best_epoch_is_chosen_by(
    client: TestClient, extra: dict[str, Any], name: str
) -> None:
    job = client.post("/v1/jobs", json={**BODY, **extra}).json()
    assert job["best_metric_name"] == name
    (listed,) = client.get("/v1/jobs").json()["items"]
    assert listed["best_metric_name"] == name


def test_oversize_body_is_413(client: TestClient) -> None:
    response = client.post("/v1/jobs", json={**BODY, "name": "x" * 2_000_000})
    assert response.status_code == 413
    chunks = iter(
        [b'{"name": "', b"x" * 2_000_000, b'"}']
    )  # no Content-Length: counted as it streams
    response = client.post("/v1/jobs", content=chunks, headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_unknown_ids_are_404_and_cancel_rules(client: TestClient) -> None:
    assert client.get("/v1/jobs/nope").status_code == 404
    assert client.get("/v1/jobs/nope/metrics").status_code == 404
    job = client.post("/v1/jobs", json=BODY).json()
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 409


def test_list_filters_and_pages(client: TestClient) -> None:
    ids = [
        client.post("/v1/jobs", json={**BODY, "framework": fw}).json()["id"]
        for fw in ("pytorch", "tensorflow", "pytorch")
    ]
    page = client.get("/v1/jobs", params={"limit": 2}).json()
    rest = client.get("/v1/jobs", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [j["id"] for j in page["items"] + rest["items"]] == ids[::-1] and rest[
        "next_cursor"
    ] is None
    tf_jobs = client.get("/v1/jobs", params={"framework": "tensorflow"}).json()["items"]
    assert [j["id"] for j in tf_jobs] == [ids[1]]
    assert client.get("/v1/jobs", params={"status": "bogus"}).status_code == 422
    assert client.get("/v1/jobs", params={"cursor": "garbage"}).status_code == 422


def test_metrics_endpoint_serves_rows_since_epoch(client: TestClient) -> None:
    job_id = client.post("/v1/jobs", json=BODY).json()["id"]
    with session_scope() as session:
        crud.claim_job(session, job_id, "w", 30)
    with session_scope() as session:
        for epoch in (1, 2, 3):
            logs = {"train_loss": 1.0 / epoch, "val_loss": float("nan")}
            if epoch == 3:  # a streamed epoch's input
                logs |= {"data_wait_seconds": 0.5, "data_read_bytes": 2.0**40}
                logs |= {"data_cache_hits": 3.0, "data_cache_misses": 1.0}
            epoch_rows.record_epoch(session, job_id, 1, epoch, logs)
    body = client.get(f"/v1/jobs/{job_id}/metrics", params={"since_epoch": 1}).json()
    assert body["job_id"] == job_id and [r["epoch"] for r in body["items"]] == [2, 3]
    assert body["items"][0]["val_loss"] is None and body["items"][0]["train_loss"] == 0.5
    second, third = body["items"]
    assert second["data_read_bytes"] is None and second["data_cache_hits"] is None
    assert third["data_read_bytes"] == 2**40  # a terabyte, exact
    assert (third["data_cache_hits"], third["data_cache_misses"]) == (3, 1)


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz")
    assert (
        ready.status_code == 200
        and ready.json()["database"] == "ok"
        and ready.json()["broker"] == "ok"
    )
