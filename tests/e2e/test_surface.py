"""The Python client, the SSE stream and /metrics against a live service (API + Celery worker),
on the embedded default and on PostgreSQL + Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from epochal_client.client import ApiError, Client, Event, parse_sse
from tests.helpers import Service, running_service, scaled

pytestmark = pytest.mark.e2e
DIGITS: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "training": {"epochs": 3},
}
LONG: dict[str, Any] = {  # epochs of a fraction of a second, far more than a test waits for
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 4000},
    "training": {"epochs": 1000, "batch_size": 16},
}


@pytest.fixture(scope="module")
def service(service_env: dict[str, str]) -> Iterator[Service]:
    with running_service(service_env) as svc:
        yield svc


@pytest.fixture(scope="module")
def client(service: Service) -> Iterator[Client]:
    with Client(service.url, service.api_key) as c:
        yield c


def label(event: Event) -> tuple[str, Any]:
    return (
        event.type,
        event.data["to_status"] if event.type == "transition" else event.data["epoch"],
    )


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(series: dict[Any, float], name: str, **labels: str) -> float:
    return series.get((name, tuple(sorted(labels.items()))), 0.0)


def test_client_follows_a_job_and_metrics_series_move(service: Service, client: Client) -> None:
    before = scrape(service.url)
    assert ("epochal_jobs", (("framework", "pytorch"), ("status", "succeeded"))) in before
    job = client.submit({**DIGITS, "name": "surface-client"})
    assert job.status == "queued" and job.epochs == 3

    streamed = list(client.follow(job.id, mode="sse"))
    expected = [("transition", s) for s in ("queued", "running")] + [
        ("epoch", n) for n in (1, 2, 3)
    ]
    assert [label(e) for e in streamed] == [*expected, ("transition", "succeeded")]
    assert all(e.id for e in streamed)
    polled = list(client.follow(job.id, mode="poll", poll_interval=0.2))
    assert [label(e) for e in polled] == [label(e) for e in streamed]

    done = client.wait(job.id, timeout=scaled(60))
    assert done.status == "succeeded" and done.result and done.result["val_accuracy"] > 0.5
    rows = client.metrics(job.id)
    assert [r.epoch for r in rows] == [1, 2, 3] and rows[-1].train_loss < rows[0].train_loss
    assert [r.epoch for r in client.metrics(job.id, since_epoch=2)] == [3]
    assert client.list(limit=1)[0].id == job.id
    assert job.id in {j.id for j in client.list(status="succeeded")}

    after = scrape(service.url)
    assert value(after, "epochal_workers_live") >= 1  # it has run a job: its heartbeat is fresh
    succeeded = {"framework": "pytorch", "status": "succeeded"}
    assert (
        value(after, "epochal_jobs", **succeeded) == value(before, "epochal_jobs", **succeeded) + 1
    )
    for name in ("epochal_epochs_finished_total", "epochal_epoch_duration_seconds_count"):
        assert (
            value(after, name, framework="pytorch") == value(before, name, framework="pytorch") + 3
        )
    assert value(after, "epochal_epoch_duration_seconds_sum", framework="pytorch") > 0
    route = {"method": "GET", "route": "/v1/jobs/{job_id}", "status": "200"}
    assert value(after, "epochal_http_request_duration_seconds_count", **route) > value(
        before, "epochal_http_request_duration_seconds_count", **route
    )
    assert value(after, "epochal_event_polls_total") > value(before, "epochal_event_polls_total")
    assert value(after, "epochal_sse_streams") == 0


def test_sse_wire_format_order_resume_and_owner_scope(service: Service, client: Client) -> None:
    job = client.submit({**DIGITS, "name": "surface-sse", "training": {"epochs": 2}})
    with service.client() as http, http.stream("GET", f"/v1/jobs/{job.id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(parse_sse(response.iter_lines()))  # returns only when the server ends it
    labels = [label(e) for e in events]
    assert labels == [
        ("transition", "queued"),
        ("transition", "running"),
        ("epoch", 1),
        ("epoch", 2),
        ("transition", "succeeded"),
    ]
    assert len({e.id for e in events}) == len(events)

    for index in (0, 2, 3):
        resumed = list(client.follow(job.id, last_event_id=events[index].id, mode="sse"))
        assert [label(e) for e in resumed] == labels[index + 1 :]

    with service.client() as http:
        bad = http.get(f"/v1/jobs/{job.id}/events", headers={"Last-Event-ID": "nope"})
        assert bad.status_code == 422 and "Last-Event-ID" in bad.json()["detail"]
    stranger = service.create_key("stranger")
    with service.client(stranger) as http:
        assert http.get(f"/v1/jobs/{job.id}/events").status_code == 404
    with service.client("") as http:
        assert http.get(f"/v1/jobs/{job.id}/events").status_code == 401


def test_client_cancel_ends_the_followed_stream(client: Client) -> None:
    job = client.submit({**LONG, "name": "surface-cancel"})
    events = client.follow(job.id)
    for event in events:
        if event.type == "epoch":
            break
    assert client.cancel(job.id).status in ("cancelling", "cancelled")
    rest = list(events)
    assert rest[-1].type == "transition" and rest[-1].data["to_status"] == "cancelled"
    assert client.get(job.id).stop_reason == "cancelled"


def test_client_raises_problem_details(service: Service, client: Client) -> None:
    with pytest.raises(ApiError) as invalid:
        client.submit({**DIGITS, "training": {"epochs": 0}})
    assert invalid.value.status == 422
    assert [e["field"] for e in invalid.value.errors] == ["training.epochs"]
    with pytest.raises(ApiError) as missing:
        client.get("no-such-job")
    assert missing.value.status == 404 and "no-such-job" in missing.value.detail
    with (
        Client(service.url, "ep_000000000000_wrong") as stranger,
        pytest.raises(ApiError) as denied,
    ):
        stranger.list()
    assert denied.value.status == 401
    with Client("http://127.0.0.1:9", "k") as nowhere, pytest.raises(ApiError) as down:
        nowhere.get("x")
    assert down.value.status == 0
