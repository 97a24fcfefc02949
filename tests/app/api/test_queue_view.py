"""A queued job explains itself: `queue` on GET /v1/jobs/{id}, and GET /v1/queue."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.db import session_scope
from app.domain import crud, epoch_rows
from app.domain.states import JobStatus
from app.domain.tables import EpochMetric, Job, UsageSpan, Worker, utcnow
from app.scheduler.durations import Overheads
from tests.conftest import make_key

TINY = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 4}}


@pytest.fixture
def app_client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


def as_key(client: TestClient, key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def submit(client: TestClient, key: str, **spec: object) -> str:
    response = client.post("/v1/jobs", json={**TINY, **spec}, headers=as_key(client, key))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def add_worker(busy_with: str | None = None) -> None:
    with session_scope() as session:
        session.add(Worker(name="w1", hostname="h", pid=1, gpus=0, devices=[], queues=["gpus-0"]))
        session.flush()
        if busy_with:
            session.execute(update(Worker).values(current_job_id=busy_with))


def test_a_queued_job_says_its_position_reason_and_start(app_client: TestClient) -> None:
    key = make_key("user")
    running = submit(app_client, key)
    with session_scope() as session:  # the one worker runs it: 1 of 4 epochs done, 10 s each
        crud.claim_job(session, running, "w1", 60)
    with session_scope() as session:
        epoch_rows.record_epoch(session, running, 1, 1, {"epoch_seconds": 10.0})
    add_worker(busy_with=running)
    low, high = submit(app_client, key, priority=10), submit(app_client, key, priority=90)
    job = app_client.get(f"/v1/jobs/{high}", headers=as_key(app_client, key)).json()
    assert job["priority"] == 90
    assert job["queue"]["position"] == 1
    assert job["queue"]["reason"] == "next to run: every worker that fits is busy"
    start = datetime.fromisoformat(job["queue"]["estimated_start"])
    left = (start - utcnow()).total_seconds()
    assert 20 < left <= 30  # 3 epochs of 10 s left on the running job
    behind = app_client.get(f"/v1/jobs/{low}", headers=as_key(app_client, key)).json()["queue"]
    assert behind["position"] == 2 and behind["reason"] == "behind 1 jobs of higher priority"
    done = app_client.get(f"/v1/jobs/{running}", headers=as_key(app_client, key)).json()
    assert done["queue"] is None


def test_the_queue_shows_own_jobs_in_full_and_others_as_counts(app_client: TestClient) -> None:
    mine, theirs, admin = make_key("mine"), make_key("theirs"), make_key("root", admin=True)
    add_worker()
    own = submit(app_client, mine, priority=70)
    for _ in range(2):
        submit(app_client, theirs, priority=30)
    view = app_client.get("/v1/queue", headers=as_key(app_client, mine)).json()
    assert [entry["id"] for entry in view["jobs"]] == [own]
    assert view["jobs"][0]["position"] == 1 and view["queued"] == 3
    assert [(c["priority"], c["jobs"]) for c in view["others"]] == [(30, 2)]
    everything = app_client.get("/v1/queue", headers=as_key(app_client, admin)).json()
    assert [e["position"] for e in everything["jobs"]] == [1, 2, 3] and everything["others"] == []


def test_the_queue_names_no_other_key_but_an_admin_sees_every_owner(
    app_client: TestClient,
) -> None:
    mine, theirs, third = make_key("mine"), make_key("theirs"), make_key("third")
    admin = make_key("root", admin=True)
    add_worker()
    submit(app_client, mine, priority=70)
    others = [submit(app_client, key, priority=30) for key in (theirs, theirs, third)]
    with session_scope() as session:
        owners = {crud.get_job(session, job_id).owner_id for job_id in others}  # type: ignore[union-attr]
    response = app_client.get("/v1/queue", headers=as_key(app_client, mine))
    assert not any(str(owner) in response.text for owner in owners)
    assert response.json()["others"] == [
        {"owner_id": None, "owner": "other keys", "priority": 30, "jobs": 3}
    ]
    everything = app_client.get("/v1/queue", headers=as_key(app_client, admin)).json()
    assert {e["owner_id"] for e in everything["jobs"][1:]} == owners


def test_no_live_worker_and_no_big_enough_worker_are_reasons(app_client: TestClient) -> None:
    key = make_key("user")
    waiting = submit(app_client, key)
    reason = app_client.get(f"/v1/jobs/{waiting}", headers=as_key(app_client, key)).json()
    assert reason["queue"]["reason"] == "waiting for a worker: none is live"
    assert reason["queue"]["estimated_start"] is None


def test_priority_over_the_cap_or_an_opt_out_is_refused(app_client: TestClient) -> None:
    from app.domain.keys import set_share

    key = make_key("capped")
    with session_scope() as session:
        set_share(session, key.split("_")[1], max_priority=40)
    headers = as_key(app_client, key)
    over = app_client.post("/v1/jobs", json={**TINY, "priority": 41}, headers=headers)
    assert over.status_code == 403 and "40" in over.json()["detail"]
    opt_out = app_client.post("/v1/jobs", json={**TINY, "preemptible": False}, headers=headers)
    assert opt_out.status_code == 403
    assert app_client.post("/v1/jobs", json={**TINY, "priority": 40}, headers=headers).is_success


def test_metrics_show_depth_by_priority_preemptions_and_waits(app_client: TestClient) -> None:
    from app.core.config import get_settings
    from app.scheduler.claim import claim_next

    key = make_key("user")
    submit(app_client, key, priority=90)
    submit(app_client, key, priority=10)
    with session_scope() as session:
        assert claim_next(session, "w1", 0, get_settings()) is not None  # the 90 one
    text = app_client.get("/metrics").text
    assert 'epochal_queue_depth_by_priority{priority="10"} 1.0' in text
    assert 'epochal_queue_depth_by_priority{priority="90"}' not in text
    assert "epochal_preemptions_total 0.0" in text
    assert 'epochal_queue_wait_seconds_bucket{le="+Inf"} 1.0' in text
    assert "epochal_queue_wait_seconds_count 1.0" in text


def rows_at(job_id: str, now: datetime, ago: list[float], attempt: int = 1) -> None:
    """Epoch rows 1, 2, … of the job, recorded the given seconds before now (10 s measured)."""
    with session_scope() as session:
        for epoch, seconds in enumerate(ago, start=1):
            epoch_rows.record_epoch(session, job_id, attempt, epoch, {"epoch_seconds": 10.0})
            session.execute(
                update(EpochMetric)
                .where(EpochMetric.job_id == job_id, EpochMetric.epoch == epoch)
                .values(recorded_at=now - timedelta(seconds=seconds))
            )


def test_a_running_job_frees_its_worker_after_its_pace_less_the_epoch_under_way_and_wind_down(
    app_client: TestClient,
) -> None:
    from app.scheduler.durations import overheads, remaining

    key, now = make_key("user"), utcnow()
    earlier = submit(app_client, key)  # ran through: up 3 s, epochs 4 s apart, down 2 s
    with session_scope() as session:
        crud.claim_job(session, earlier, "w1", 60)
    rows_at(earlier, now, [100.0, 96.0, 92.0, 88.0])
    with session_scope() as session:
        crud.finish_job(
            session, earlier, 1, JobStatus.succeeded, stop_reason=None, reason="completed"
        )
        session.execute(
            update(Job)
            .where(Job.id == earlier)
            .values(
                started_at=now - timedelta(seconds=107),
                finished_at=now - timedelta(seconds=86),
            )
        )
    running = submit(app_client, key, training={"epochs": 5})
    with session_scope() as session:
        crud.claim_job(session, running, "w1", 60)
        started = (now - timedelta(seconds=60)).timestamp()  # this run's start
        span = update(UsageSpan).where(UsageSpan.job_id == running)
        session.execute(span.values(started=started))
    # Epoch 1 before a preemption and resume, 2-4 in this run: 8 s apart (not the 10 s trained).
    rows_at(running, now, [70.0, 50.0, 42.0, 34.0])
    with session_scope() as session:
        assert overheads(session, "pytorch") == pytest.approx(Overheads(3.0, 2.0), abs=0.01)
        # 1 epoch left of 8 s, 34 s of it gone already: only the wind-down is left
        assert remaining(session, running, now) == pytest.approx(0.0, abs=0.01)
        later = now - timedelta(seconds=30)  # read 30 s ago: 4 s of the epoch, then 2 s
        assert remaining(session, running, later) == pytest.approx(6.0, abs=0.01)
