"""The scheduler's claim on SQLite and PostgreSQL: priority, then fair share, then age."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.keys import create_key
from app.domain.states import JobStatus, RequeueCause, StopReason
from app.domain.tables import Job, UsageSpan, Worker, utcnow
from app.scheduler.claim import claim_next
from app.scheduler.policy import Share, fair_order, priority_problem
from app.scheduler.preempt import preempt_round
from app.schemas.job_spec import JobSpec


def new_job(priority: int = 50, owner: str | None = None, gpus: int = 0) -> str:
    body = {"framework": "pytorch", "dataset": {"name": "digits"}, "priority": priority}
    if gpus:
        body["resources"] = {"gpus": gpus}
    with session_scope() as session:
        job = crud.create_job(session, JobSpec.model_validate(body), "gpus-0", owner_id=owner)
        return job.id


def claim(gpus: int = 0) -> Job | None:
    with session_scope() as session:
        return claim_next(session, "w1", gpus, get_settings())


def finish(job: Job, seconds: float = 10.0, started: datetime | None = None) -> None:
    """End the attempt as succeeded, as if it had run `seconds` from `started` (default: until
    now) on the worker."""
    with session_scope() as session:
        crud.finish_job(
            session,
            job.id,
            job.attempt,
            JobStatus.succeeded,
            stop_reason=StopReason.completed,
            reason="done",
        )
        start = started or utcnow() - timedelta(seconds=seconds)
        session.execute(
            update(UsageSpan)
            .where(UsageSpan.job_id == job.id)
            .values(started=start.timestamp(), ended=start.timestamp() + seconds)
        )


def new_key(name: str) -> str:
    with session_scope() as session:
        return create_key(session, name)[0].id


def test_a_high_priority_job_runs_before_older_low_ones(db_env: dict[str, str]) -> None:
    low = [new_job(priority=10) for _ in range(3)]
    high = new_job(priority=90)
    order = []
    while (job := claim()) is not None:
        order.append(job.id)
        finish(job)
    assert order == [high, *low]


def test_a_duplicate_wake_up_finds_nothing_and_a_job_runs_once(db_env: dict[str, str]) -> None:
    only = new_job()
    first = claim()
    assert first is not None and first.id == only and first.attempt == 1
    assert claim() is None  # the second message of the same job: nothing left to run


def test_a_worker_never_claims_a_job_needing_more_gpus_than_it_has(
    db_env: dict[str, str],
) -> None:
    big = new_job(priority=90, gpus=2)
    small = new_job(priority=10)
    cpu_only = claim(gpus=0)
    assert cpu_only is not None and cpu_only.id == small
    assert claim(gpus=0) is None
    gpu_box = claim(gpus=2)
    assert gpu_box is not None and gpu_box.id == big


def test_two_keys_of_equal_priority_alternate(db_env: dict[str, str]) -> None:
    a, b = new_key("a"), new_key("b")
    jobs = {new_job(owner=a): "a" for _ in range(4)} | {new_job(owner=b): "b" for _ in range(4)}
    order, clock = [], utcnow() - timedelta(hours=1)  # one worker: runs follow each other
    for seconds in (10, 11, 9, 12, 10, 8, 11, 10):  # jobs never take quite the same time
        job = claim()
        assert job is not None
        order.append(jobs[job.id])
        finish(job, seconds, started=clock)
        clock += timedelta(seconds=seconds)
    assert order == ["a", "b"] * 4


def test_a_heavier_weight_gets_a_bigger_share() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    light = Share("light", used=100, weight=1, last_start=now, oldest=now)
    heavy = Share("heavy", used=150, weight=2, last_start=now, oldest=now)
    assert [s.owner for s in fair_order([light, heavy], tolerance=0.25)] == ["heavy", "light"]


def test_level_keys_go_by_the_longest_since_their_last_start() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    recent = Share("recent", used=100, weight=1, last_start=now, oldest=now)
    earlier = Share(
        "earlier", used=110, weight=1, last_start=now - timedelta(minutes=1), oldest=now
    )
    never = Share("never", used=0, weight=1, last_start=None, oldest=now + timedelta(hours=1))
    assert [s.owner for s in fair_order([recent, earlier], 0.25)] == ["earlier", "recent"]
    assert [s.owner for s in fair_order([recent, earlier], 0.0)] == ["recent", "earlier"]
    assert fair_order([recent, earlier, never], 0.25)[0].owner == "never"


def test_a_key_may_not_ask_over_its_cap_nor_opt_out_of_preemption() -> None:
    assert priority_problem(80, True, is_admin=False, max_priority=60) is not None
    assert priority_problem(60, True, is_admin=False, max_priority=60) is None
    assert priority_problem(50, False, is_admin=False, max_priority=None) is not None
    assert priority_problem(100, False, is_admin=True, max_priority=10) is None


def running_on_worker(priority: int, preemptible: bool = True) -> Job:
    """A job running on the one live worker."""
    body = {"framework": "pytorch", "dataset": {"name": "digits"}, "priority": priority}
    with session_scope() as session:
        spec = JobSpec.model_validate({**body, "preemptible": preemptible})
        job_id = crud.create_job(session, spec, "gpus-0").id
    job = claim()
    assert job is not None and job.id == job_id
    with session_scope() as session:
        session.add(Worker(name="w1", hostname="h", pid=1, gpus=0, devices=[], queues=["gpus-0"]))
        session.flush()
        session.execute(update(Worker).values(current_job_id=job_id))
    return job


def preempt() -> int:
    with session_scope() as session:
        return preempt_round(session, get_settings())


def test_a_job_far_above_the_running_one_preempts_it_and_it_resumes_same_attempt(
    db_env: dict[str, str],
) -> None:
    low = running_on_worker(priority=10)
    high = new_job(priority=30)
    assert preempt() == 1 and preempt() == 0  # asked once, however many rounds run
    with session_scope() as session:
        victim = crud.get_job(session, low.id)
        assert victim is not None and victim.preempted_by == high
        assert crud.requeue(session, victim, RequeueCause.preempted, "stopped after epoch 3 of 10")
    first = claim()
    assert first is not None and first.id == high
    again = claim()
    assert again is not None and again.id == low.id and again.attempt == low.attempt == 1
    with session_scope() as session:
        moves = [(t.to_status, t.reason.split(" ")[0]) for t in crud.transitions(session, low.id)]
    assert moves[-2:] == [("queued", "preempted"), ("running", "claimed")]


def test_no_preemption_below_the_margin_with_a_free_worker_or_when_opted_out(
    db_env: dict[str, str],
) -> None:
    running_on_worker(priority=50, preemptible=False)
    new_job(priority=100)
    assert preempt() == 0  # not preemptible
    with session_scope() as session:
        session.execute(update(Job).where(Job.status == "running").values(preemptible=True))
    below = new_job(priority=69)
    assert preempt() == 1  # the 100 one did it; the 69 one never could (margin 20)
    with session_scope() as session:
        assert crud.get_job(session, below).preempted_by is None  # type: ignore[union-attr]
        session.execute(update(Worker).values(current_job_id=None))
        session.execute(update(Job).values(preempted_by=None))
    assert preempt() == 0  # a free worker takes the high one


def test_a_lost_worker_after_a_preemption_request_is_a_new_attempt(db_env: dict[str, str]) -> None:
    low = running_on_worker(priority=10)
    new_job(priority=90)
    assert preempt() == 1
    with session_scope() as session:
        job = crud.get_job(session, low.id)
        assert job is not None and crud.requeue(session, job, RequeueCause.lost)
    with session_scope() as session:  # the high one is claimed first
        claim_next(session, "w1", 0, get_settings())
    resumed = claim()
    assert resumed is not None and resumed.id == low.id and resumed.attempt == 2


def test_a_key_of_weight_three_runs_three_jobs_to_one(db_env: dict[str, str]) -> None:
    from app.domain.keys import set_share

    heavy, light = new_key("heavy"), new_key("light")
    with session_scope() as session:
        set_share(session, heavy, weight=3.0)
    jobs = {new_job(owner=light): "light" for _ in range(2)}
    jobs |= {new_job(owner=heavy): "heavy" for _ in range(6)}
    order, clock = [], utcnow() - timedelta(hours=1)
    for _ in range(8):
        job = claim()
        assert job is not None
        order.append(jobs[job.id])
        finish(job, 10, started=clock)
        clock += timedelta(seconds=10)
    assert order == ["light", "heavy", "heavy", "heavy", "light", "heavy", "heavy", "heavy"]


def test_a_sweeps_priority_is_every_trials() -> None:
    from app.schemas.sweep import SweepSpec
    from app.services.sweeps import trial_spec

    base = {"framework": "pytorch", "dataset": {"name": "digits"}, "priority": 20}
    space = {"optimizer.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-1}}
    body = {"base": base, "parameters": space}
    params = {"optimizer.learning_rate": 0.01}
    assert trial_spec(SweepSpec.model_validate(body), 0, params).priority == 20
    urgent = SweepSpec.model_validate({**body, "priority": 80})
    assert trial_spec(urgent, 0, params).priority == 80


def test_a_gangs_nodes_each_count_toward_its_keys_share(db_env: dict[str, str]) -> None:
    """A 4-node job for 10 s used 40 node-seconds, more than 3 single jobs of 10 s each."""
    ganged, single = new_key("ganged"), new_key("single")
    body = {"framework": "pytorch", "dataset": {"name": "digits"}, "resources": {"nodes": 4}}
    with session_scope() as session:
        gang_id = crud.create_job(
            session, JobSpec.model_validate(body), "gpus-0", owner_id=ganged
        ).id
        gang = crud.claim_job(session, gang_id, "w1", 60)  # as its gang forms: running
        assert gang is not None
    finish(gang, 10)
    for _ in range(3):
        new_job(owner=single)
        ran = claim()
        assert ran is not None and ran.owner_id == single
        finish(ran, 10)
    with session_scope() as session:
        assert session.query(UsageSpan).filter(UsageSpan.job_id == gang_id).one().slots == 4
    first, second = new_job(owner=ganged), new_job(owner=single)
    order = [job.id for job in (claim(), claim()) if job is not None]
    assert order == [second, first]  # the key that used fewer node-seconds goes first
