"""GET /v1/jobs/{id} on the fast path (app.api.polled.job_content): for a job in each state the
bytes, status and headers of the route's own answer (the ORM job through JobPublic); a job the
key may not see, an unknown id and JSON that orjson reads otherwise go on to the route."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, update

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud, epoch_rows
from app.domain.states import ErrorCode, JobStatus, RequeueCause, StopReason
from app.domain.tables import Job, JobTransition, Worker
from app.scheduler import position, standings
from tests.conftest import make_key
from tests.helpers import VIA_ROUTE

BODY = {
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "training": {"epochs": 4},
    "optimizer": {"name": "adam", "learning_rate": 1e-5},
    "tags": {"note": "é ✓ \u0000", "team": "vision"},
}
# The estimated start plays the queue forward from now: fixed, so two answers can match.
NOW = datetime(2026, 12, 3, 12, 0, 0, 250_000, tzinfo=UTC)


@pytest.fixture
def client(
    db_env: dict[str, str], answered: list[bool], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    from app.main import create_app

    monkeypatch.setattr(position, "utcnow", lambda: NOW)
    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('owner')}"
        yield test_client


def submit(client: TestClient, **extra: object) -> str:
    response = client.post("/v1/jobs", json={**BODY, **extra})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def jobs_in_every_state(client: TestClient) -> dict[str, str]:
    """A running job with rows, a busy worker, two queued jobs behind it, a succeeded job, a
    failed one with an old unredacted error, a cancelled one, a requeued one and one without
    transitions."""
    ids = {name: submit(client) for name in ("running", "succeeded", "failed", "requeued")}
    ids["cancelled"] = submit(client)
    for name in ("running", "succeeded", "failed", "requeued"):
        with session_scope() as session:
            assert crud.claim_job(session, ids[name], "w1", 60) is not None
    with session_scope() as session:
        for n, loss in ((1, 0.5), (2, float("nan")), (3, 1e-7)):
            logs = {"train_loss": loss, "val_accuracy": 1 / 3, "epoch_seconds": 10.0}
            epoch_rows.record_epoch(session, ids["running"], 1, n, logs, best=(n, 1 / 3))
        session.add(Worker(name="w1", hostname="h", pid=1, gpus=0, devices=[], queues=["gpus-0"]))
        session.flush()
        session.execute(update(Worker).values(current_job_id=ids["running"]))
        progress = {"epoch": 4, "step": 37, "steps": 118}  # the lease renewal's JSON column
        session.execute(update(Job).where(Job.id == ids["running"]).values(step_progress=progress))
    result = {"val_accuracy": 0.9375, "history": [1.0, 1e22, -0.0, 12], "counts": {"n": 2**53}}
    with session_scope() as session:
        assert crud.finish_job(
            session,
            ids["succeeded"],
            1,
            JobStatus.succeeded,
            stop_reason=StopReason.completed,
            reason="all epochs done",
            result=result,
        )
        assert crud.finish_job(
            session,
            ids["failed"],
            1,
            JobStatus.failed,
            stop_reason=StopReason.error,
            reason="crashed",
            error_code=ErrorCode.child_crashed,
            error="boom",
        )
        # A row written before errors were redacted on the way in: both paths redact it.
        error = "Traceback: /home/someone/.epochal/artifacts/x/model.onnx missing"
        session.execute(update(Job).where(Job.id == ids["failed"]).values(error=error))
        job = crud.get_job(session, ids["requeued"])
        assert job is not None and crud.requeue(session, job, RequeueCause.lost)
        cancelled = crud.get_job(session, ids["cancelled"])
        assert cancelled is not None
        crud.request_cancel(session, cancelled)
    ids["queued_high"] = submit(client, priority=90)
    ids["queued_low"] = submit(client, priority=10)
    ids["no_transitions"] = submit(client)  # its one row from the join is NULLs past the job's
    with session_scope() as session:
        session.execute(delete(JobTransition).where(JobTransition.job_id == ids["no_transitions"]))
        session.execute(update(Job).where(Job.id == ids["no_transitions"]).values(status="failed"))
    standings.refresh(get_settings())  # as a maintenance round would, after changes made here
    return ids


def assert_same_answer(
    client: TestClient, answered: list[bool], target: str, headers: dict[str, str] | None = None
) -> str:
    """The fast path answers `target` with the route's bytes, status and headers; its body."""
    answered.clear()
    fast = client.get(target, headers=headers)
    assert answered == [True], target
    answered.clear()
    slow = client.get(target + ("&" if "?" in target else "?") + VIA_ROUTE, headers=headers)
    assert answered == [False], target
    assert fast.status_code == slow.status_code == 200, (target, slow.text)
    assert fast.content == slow.content, target
    assert fast.headers == slow.headers, target
    return fast.text


def test_a_job_in_every_state_is_answered_here_with_the_routes_bytes(
    client: TestClient, answered: list[bool]
) -> None:
    ids = jobs_in_every_state(client)
    bodies = {
        name: assert_same_answer(client, answered, f"/v1/jobs/{i}") for name, i in ids.items()
    }
    assert assert_same_answer(client, answered, f"/v1/jobs/{ids['running']}?x=1")
    admin = {"Authorization": f"Bearer {make_key('root', admin=True)}"}
    client.get("/v1/jobs", headers=admin)  # its key in the cache
    for job_id in ids.values():  # an admin sees every job, as the route shows it
        assert_same_answer(client, answered, f"/v1/jobs/{job_id}", headers=admin)
    queued = client.get(f"/v1/jobs/{ids['queued_high']}").json()
    assert queued["queue"]["position"] == 1 and queued["queue"]["estimated_start"] is not None
    assert queued["wait_reason"] is not None
    assert (
        client.get(f"/v1/jobs/{ids['queued_low']}").json()["queue"]["position"] == 3
    )  # behind the requeued job
    assert client.get(f"/v1/jobs/{ids['requeued']}").json()["queue"] is not None
    assert '"transitions":[]}' in bodies["no_transitions"]
    assert '"transitions":[{' in bodies["succeeded"] and "1e+22,-0.0,12]" in bodies["succeeded"]
    assert "/home/someone" not in bodies["failed"] and "…/model.onnx" in bodies["failed"]


def test_what_the_key_may_not_see_gets_the_routes_404(
    client: TestClient, answered: list[bool]
) -> None:
    job = submit(client)
    other = {"Authorization": f"Bearer {make_key('someone-else')}"}
    client.get("/v1/jobs", headers=other)  # the other key is in the cache
    for target, headers in (
        (f"/v1/jobs/{job}", other),
        ("/v1/jobs/00000000-0000-0000-0000-000000000000", {}),
    ):
        answered.clear()
        response = client.get(target, headers=headers)
        assert answered == [False], target
        assert response.status_code == 404 and "no job" in response.text
        assert response.headers["content-type"] == "application/problem+json"
    answered.clear()
    assert client.get("/v1/jobs/not.an.id").status_code == 422
    assert answered == [False]


def test_json_that_orjson_reads_otherwise_goes_to_the_route(
    client: TestClient, answered: list[bool]
) -> None:
    job = submit(client)
    with session_scope() as session:
        assert crud.claim_job(session, job, "w1", 60) is not None
    with session_scope() as session:
        big = {"n": 2**70, "m": -(2**63) - 1}  # orjson would read both as floats
        session.execute(update(Job).where(Job.id == job).values(result=big))
    answered.clear()
    response = client.get(f"/v1/jobs/{job}")
    assert answered == [False]
    assert response.status_code == 200
    assert b'"n":1180591620717411303424' in response.content


def test_a_job_answered_here_is_counted_by_its_route(client: TestClient) -> None:
    job = submit(client)
    for _ in range(2):
        assert client.get(f"/v1/jobs/{job}").status_code == 200
    scrape = client.get("/metrics").text
    assert 'route="/v1/jobs/{job_id}",status="200"' in scrape
    assert f"/v1/jobs/{job}" not in scrape
