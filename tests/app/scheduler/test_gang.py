"""Multi-node jobs: resources.nodes at the door, and gang admission in SQL on SQLite and
PostgreSQL (a gang opens only while enough workers are free, forms when every seat is held,
and lets its workers go when it cannot form)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select, update

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud, worker_reads
from app.domain.states import JobStatus, RequeueCause
from app.domain.tables import GangSeat, Job, Worker, utcnow
from app.main import create_app
from app.scheduler import gang, preempt
from app.scheduler.claim import claim_next
from app.scheduler.gang import Rendezvous, TakenSeat
from app.scheduler.position import standing
from app.schemas.job_spec import JobSpec

HOST = Rendezvous("10.0.0.1", 29500)


def gang_spec(nodes: int = 2, **resources: object) -> dict[str, object]:
    return {
        "framework": "pytorch",
        "dataset": {"name": "digits"},
        "resources": {"nodes": nodes, **resources},
        "training": {"batch_size": 24},  # divides by 2 and 3 nodes
    }


def new_job(nodes: int = 2, priority: int = 50) -> str:
    with session_scope() as session:
        spec = JobSpec.model_validate({**gang_spec(nodes), "priority": priority})
        return crud.create_job(session, spec, "gpus-0").id


def add_worker(name: str) -> None:
    with session_scope() as session:
        session.add(Worker(name=name, hostname="h", pid=1, gpus=0, devices=[], queues=[]))


def claim(worker: str, where: Rendezvous = HOST) -> Job | TakenSeat | None:
    with session_scope() as session:
        return claim_next(session, worker, 0, get_settings(), where)


def job_of(job_id: str) -> Job:
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        session.expunge(job)
        return job


def seats(job_id: str) -> list[tuple[str, int, int | None]]:
    with session_scope() as session:
        return [(s.worker, s.rank, s.attempt) for s in gang.seats_of(session, job_id)]


def busy_with(worker: str) -> str | None:
    with session_scope() as session:
        return session.scalar(select(Worker.current_job_id).where(Worker.name == worker))


def test_nodes_defaults_to_one_and_is_bounded() -> None:
    assert JobSpec.model_validate(gang_spec(1)).resources.nodes == 1
    assert JobSpec.model_validate(gang_spec(2, replicas=2)).resources.world_size == 4
    for bad in (0, 17):
        with pytest.raises(ValidationError):
            JobSpec.model_validate(gang_spec(bad))


@pytest.mark.parametrize("strategy", ["auto", "mirrored"])
def test_a_tensorflow_gang_of_one_replica_per_node_is_accepted(strategy: str) -> None:
    body = {**gang_spec(2, strategy=strategy), "framework": "tensorflow"}
    assert JobSpec.model_validate(body).resources.world_size == 2


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            {**gang_spec(2, replicas=2), "framework": "tensorflow"},
            "resources.replicas > 1 with resources.nodes > 1 is not supported for TensorFlow",
        ),
        (gang_spec(2, gpus=1), "gpus > 0 is not supported yet"),
        (gang_spec(2, strategy="single"), "a multi-node job uses ddp (PyTorch) or mirrored"),
        ({**gang_spec(3), "training": {"batch_size": 32}}, "replica count 3 (nodes × replicas)"),
        ({**gang_spec(17)}, "resources.nodes"),
    ],
)
def test_what_a_gang_cannot_run_yet_is_a_422_naming_it(
    db_env: dict[str, str], api_key: str, body: dict[str, object], words: str
) -> None:
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {api_key}"
        response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert words in response.json()["detail"]


def test_a_gang_waits_holding_nothing_while_too_few_workers_are_free(
    db_env: dict[str, str],
) -> None:
    job_id = new_job()
    add_worker("w1")
    assert claim("w1") is None  # one free worker: the job is not even picked
    assert seats(job_id) == [] and busy_with("w1") is None
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        assert standing(session, job, get_settings()).reason == "needs 2 workers; 1 free"
        assert worker_reads.wait_reason(session, job, 15) == (
            "waiting for 2 free workers at once (a gang); 1 free"
        )


def test_a_gang_opens_then_forms_when_every_seat_is_held(db_env: dict[str, str]) -> None:
    job_id = new_job()
    single = new_job(nodes=1)
    for name in ("w1", "w2", "w3"):
        add_worker(name)
    assert claim("w1") == TakenSeat(job_id, 0, 2)  # oldest first: it hosts the rendezvous
    assert job_of(job_id).status == JobStatus.queued  # forming: not running yet
    with session_scope() as session:
        forming = crud.get_job(session, job_id)
        assert forming is not None
        why = standing(session, forming, get_settings()).reason
        assert why == "forming its gang: 1 of 2 workers joined"
    assert busy_with("w1") == job_id  # counted busy: no second gang counts it as free
    assert claim("w2") == TakenSeat(job_id, 1, 2)  # a woken worker joins before picking anything
    job = job_of(job_id)
    assert (job.status, job.attempt, job.worker_name) == (JobStatus.running, 1, "w1")
    assert seats(job_id) == [("w1", 0, 1), ("w2", 1, 1)]
    with session_scope() as session:
        host = gang.seats_of(session, job_id)[0]
        assert (host.address, host.port) == (HOST.address, HOST.port)
    third = claim("w3")  # the gang is full: the next worker takes the next job
    assert isinstance(third, Job) and third.id == single


def test_two_gangs_at_once_never_share_a_seat_or_a_rendezvous(db_env: dict[str, str]) -> None:
    first, second = new_job(), new_job()
    for name in ("w1", "w2", "w3", "w4"):
        add_worker(name)
    assert claim("w1", Rendezvous("10.0.0.1", 1001)) == TakenSeat(first, 0, 2)
    assert claim("w2", Rendezvous("10.0.0.2", 1002)) == TakenSeat(first, 1, 2)  # forms the first
    assert claim("w3", Rendezvous("10.0.0.3", 1003)) == TakenSeat(second, 0, 2)
    assert claim("w4", Rendezvous("10.0.0.4", 1004)) == TakenSeat(second, 1, 2)
    assert seats(first) == [("w1", 0, 1), ("w2", 1, 1)]
    assert seats(second) == [("w3", 0, 1), ("w4", 1, 1)]
    with session_scope() as session:  # every seat publishes its own (TensorFlow's servers)
        published = [(s.address, s.port) for s in gang.seats_of(session, second)]
        hosts = [gang.seats_of(session, job)[0] for job in (first, second)]
        assert [(h.address, h.port) for h in hosts] == [("10.0.0.1", 1001), ("10.0.0.3", 1003)]
    assert published == [("10.0.0.3", 1003), ("10.0.0.4", 1004)]


def test_a_forming_gang_whose_seat_lapses_lets_its_workers_go(db_env: dict[str, str]) -> None:
    job_id = new_job(nodes=3)
    for name in ("w1", "w2", "w3"):
        add_worker(name)
    assert claim("w1") == TakenSeat(job_id, 0, 3)
    assert claim("w2") == TakenSeat(job_id, 1, 3)
    with session_scope() as session:  # w2 died while waiting: its seat is not renewed
        session.execute(
            update(GangSeat)
            .where(GangSeat.worker == "w2")
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    with session_scope() as session:
        assert gang.dissolve_stale(session, get_settings()) == [job_id]  # to be woken again
    assert seats(job_id) == [] and busy_with("w1") is None and busy_with("w2") is None
    assert job_of(job_id).status == JobStatus.queued
    with session_scope() as session:
        assert not gang.renew_seat(session, job_id, "w1", get_settings())  # w1 stops waiting


def test_a_gang_that_does_not_fill_within_a_lease_is_dissolved(db_env: dict[str, str]) -> None:
    job_id = new_job()
    add_worker("w1")
    add_worker("w2")
    assert claim("w1") == TakenSeat(job_id, 0, 2)
    with session_scope() as session:  # w2 was taken by something else meanwhile
        session.execute(update(Worker).where(Worker.name == "w2").values(current_job_id="x"))
        session.execute(update(GangSeat).values(joined_at=utcnow() - timedelta(seconds=3600)))
    with session_scope() as session:
        assert gang.dissolve_stale(session, get_settings()) == [job_id]
    assert seats(job_id) == [] and busy_with("w1") is None


def test_rank_0_sees_a_member_lost_or_lapsed(db_env: dict[str, str]) -> None:
    job_id = new_job()
    add_worker("w1")
    add_worker("w2")
    claim("w1")
    claim("w2")
    with session_scope() as session:
        assert gang.broken(session, job_id, 1, "w1") is None
        gang.end_seat(session, job_id, "w2", gang.LOST)
    with session_scope() as session:
        assert gang.broken(session, job_id, 1, "w1") == "node 1 (w2) lost its training process"
        gang.end_seat(session, job_id, "w2", gang.SEATED)
        session.execute(
            update(GangSeat)
            .where(GangSeat.worker == "w2")
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    with session_scope() as session:
        assert "stopped renewing its seat" in str(gang.broken(session, job_id, 1, "w1"))
        gang.end_seat(session, job_id, "w2", gang.DONE)  # a clean end is no loss
    with session_scope() as session:
        assert gang.broken(session, job_id, 1, "w1") is None


@pytest.fixture
def _ended(db_env: dict[str, str]) -> Iterator[str]:
    job_id = new_job()
    add_worker("w1")
    add_worker("w2")
    claim("w1")
    claim("w2")
    yield job_id


def test_an_ended_gangs_seats_go(_ended: str) -> None:
    with session_scope() as session:
        crud.finish_job(
            session, _ended, 1, JobStatus.succeeded, stop_reason="completed", reason="done"
        )
    with session_scope() as session:
        assert gang.dissolve_stale(session, get_settings()) == []  # nothing to wake
    assert seats(_ended) == [] and busy_with("w2") is None


def preempt_round() -> int:
    with session_scope() as session:
        return preempt.preempt_round(session, get_settings())


def run_on(worker: str, priority: int) -> str:
    """A one-node job claimed by `worker`, which is marked busy with it."""
    job_id = new_job(nodes=1, priority=priority)
    claimed = claim(worker)
    assert isinstance(claimed, Job) and claimed.id == job_id
    with session_scope() as session:
        session.execute(update(Worker).where(Worker.name == worker).values(current_job_id=job_id))
    return job_id


def stopped(job_id: str) -> None:
    """Its supervisor re-queued it after the preemption stop, and its workers are free."""
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None and crud.requeue(
            session, job, RequeueCause.preempted, "stopped after epoch 1"
        )
        gang.release(session, job_id, [s.worker for s in gang.seats_of(session, job_id)])
        session.execute(
            update(Worker).where(Worker.current_job_id == job_id).values(current_job_id=None)
        )


def test_a_running_gang_stops_whole_for_a_job_far_above_it_and_forms_again(
    db_env: dict[str, str],
) -> None:
    low = new_job(priority=10)
    for name in ("w1", "w2"):
        add_worker(name)
    claim("w1")
    claim("w2")
    with session_scope() as session:  # a worker's gpus count once per seat
        assert [r.gpus for r in preempt.running_jobs(session)] == [(0, 0)]
    high = new_job(nodes=1, priority=90)
    assert preempt_round() == 1 and preempt_round() == 0  # asked once
    assert job_of(low).preempted_by == high
    stopped(low)
    assert seats(low) == [] and busy_with("w2") is None
    first = claim("w1")
    assert isinstance(first, Job) and first.id == high
    with session_scope() as session:
        crud.finish_job(session, high, 1, JobStatus.succeeded, stop_reason="completed", reason="ok")
    assert claim("w1") == TakenSeat(low, 0, 2) and claim("w2") == TakenSeat(low, 1, 2)
    job = job_of(low)
    assert (job.status, job.attempt, job.preempted_by) == (JobStatus.running, 1, None)


def test_a_queued_gang_stops_just_enough_low_jobs_and_their_workers_wait_for_it(
    db_env: dict[str, str],
) -> None:
    for name in ("w1", "w2", "w3", "w4"):
        add_worker(name)
    low, later, middle = run_on("w2", 10), run_on("w3", 10), run_on("w4", 75)
    big = new_job(nodes=4, priority=90)  # 1 free of 4: nothing it could free would do
    assert preempt_round() == 0
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == big).values(nodes=3))
    assert preempt_round() == 2 and preempt_round() == 0  # lacks 2: the two lowest
    asked = {j: job_of(j).preempted_by for j in (low, later, middle)}
    assert asked == {low: big, later: big, middle: None}
    stopped(later)
    assert claim("w3") is None  # not its own job back: the gang's victims are stopping
    stopped(low)
    assert claim("w3") == TakenSeat(big, 0, 3)
    assert claim("w2") == TakenSeat(big, 1, 3) and claim("w1") == TakenSeat(big, 2, 3)
    assert job_of(big).status == JobStatus.running
