"""A key takes no more through a sweep than through POST /v1/jobs, in-process on both
databases: priority and preemptible are not parameters, a trial is admitted as a whole spec
with its owner's current caps (a refused one is a failed trial, with the reason), the edge
combinations are checked however many there are, one broken sweep never stops the
maintenance round for the others, a key's unfinished sweeps are bounded, and one key's slow
bodies hold one validation slot at a time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from app.core.db import session_scope
from app.domain import crud
from app.domain import sweeps as rows
from app.domain.keys import set_share
from app.domain.states import JobStatus
from app.domain.tables import Job, Sweep
from app.schemas.sweep import SweepSpec
from app.services import sweeps
from tests import hostile
from tests.app.services.test_sweep_limits import RATE, Client, clients, fields, sweep, sweep_jobs
from tests.conftest import make_key

__all__ = ["clients"]  # the fixture, shared with test_sweep_limits

# Each alone fits a 0.8 GB limit (about 0.55 GB); the largest batch with the widest layer needs
# about 1.1 GB: a grid of them costed one parameter at a time queued that trial.
WIDE = {
    "training.batch_size": {"type": "categorical", "choices": [32, 4096]},
    "model.hidden_units": {"type": "categorical", "choices": [[8], [8192]]},
}
WIDEST = {
    **hostile.BASE,
    "training": {"epochs": 1, "batch_size": 4096},
    "model": {"hidden_units": [8192]},
}
MEMORY_LIMIT = "800000000"


def key_id(key: str) -> str:
    return key.split("_")[1]


def cap(key: str, priority: int) -> None:
    with session_scope() as session:
        set_share(session, key_id(key), max_priority=priority)


def grid(parameters: dict[str, Any], **more: Any) -> dict[str, Any]:
    return sweep(hostile.BASE, parameters, sampler={"name": "grid"}, **more)


def stored_directly(body: dict[str, Any], key: str) -> str:
    """A sweep stored without the submit's checks: one stored before they existed, or a
    combination the sampled check missed."""
    with session_scope() as session:
        made, _ = sweeps.submit(session, SweepSpec.model_validate(body), key_id(key))
        return made.id


def test_priority_and_preemptible_are_not_sweep_parameters(clients: Client) -> None:
    capped = make_key("capped")
    cap(capped, 10)
    for client in (clients(make_key("admin", admin=True)), clients(capped)):
        asks = {
            "priority": {"type": "int", "low": 100, "high": 100},
            "preemptible": {"type": "categorical", "choices": [False]},
        }
        for path, dist in asks.items():
            response = client.post("/v1/sweeps", json=sweep(hostile.BASE, {**RATE, path: dist}))
            assert fields(response) == [f"parameters.{path}"]
            assert "not a sweep parameter" in response.json()["detail"]
        assert client.get("/v1/jobs").json()["items"] == []


def test_a_trial_is_admitted_with_its_owners_current_cap(clients: Client) -> None:
    key = make_key("alice")
    alice = clients(key)
    body = sweep(hostile.BASE, RATE, priority=90, max_parallel=1, max_failed_trials=0)
    created = alice.post("/v1/sweeps", json=body)
    assert created.status_code == 201, created.text
    body = created.json()
    cap(key, 10)  # an admin lowers the key's cap while the sweep runs
    first = body["trials"][0]["job_id"]
    assert alice.post(f"/v1/jobs/{first}/cancel").status_code == 200  # its end tops it up
    jobs = sorted(sweep_jobs(body["id"]), key=lambda j: j.sweep_trial or 0)
    assert [j.status for j in jobs] == [JobStatus.cancelled, JobStatus.failed]
    assert "may ask priority 10 at most, not 90" in (jobs[1].error or "")
    trial = alice.get(f"/v1/sweeps/{body['id']}").json()["trials"][1]
    assert trial["state"] == "failed"
    assert alice.get(f"/v1/jobs/{jobs[1].id}").json()["error"] == jobs[1].error
    with session_scope() as session:  # the next top-up counts it against max_failed_trials
        sweeps.top_up_unfinished(session)
    ended = alice.get(f"/v1/sweeps/{body['id']}").json()
    assert ended["status"] == "failed" and ended["finished_at"] is not None
    assert ended["error"] == "failed trials: 1, more than max_failed_trials=0"


def test_a_grid_is_costed_as_whole_trials_at_submit(
    clients: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_MAX_JOB_MEMORY_BYTES", MEMORY_LIMIT)
    alice = clients(make_key("alice"))
    refused = alice.post("/v1/jobs", json=WIDEST)
    assert refused.status_code == 422, refused.text  # what a POST of the widest trial answers
    response = alice.post("/v1/sweeps", json=grid(WIDE))
    assert sorted(fields(response)) == [f"parameters.{p}" for p in sorted(WIDE)]
    detail = response.json()["detail"]
    assert "together" in detail and "does not fit" in detail and "8192" in detail
    assert alice.get("/v1/jobs").json()["items"] == []
    for path in WIDE:  # each alone fits
        assert alice.post("/v1/sweeps", json=grid({path: WIDE[path]})).status_code == 201


def test_a_trial_no_submit_would_admit_is_a_failed_trial(
    clients: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_MAX_JOB_MEMORY_BYTES", MEMORY_LIMIT)
    key = make_key("alice")
    alice = clients(key)
    assert alice.get("/v1/sweeps").status_code == 200  # the app (and its settings) made
    sweep_id = stored_directly(grid(WIDE, max_trials=4, max_parallel=4), key)
    jobs = sweep_jobs(sweep_id)
    assert len(jobs) == 4
    failed = [j for j in jobs if j.status == JobStatus.failed]
    assert [j.spec["training"]["batch_size"] for j in failed] == [4096]
    assert failed[0].spec["model"]["hidden_units"] == [8192]
    assert "would not take" in (failed[0].error or "")
    assert "estimated" in (failed[0].error or "")
    assert all(j.status == JobStatus.queued for j in jobs if j not in failed)
    with session_scope() as session:  # tells Optuna; neither raises nor queues it again
        sweeps.top_up_unfinished(session)
    shown = alice.get(f"/v1/sweeps/{sweep_id}").json()
    assert shown["counts"] == {"failed": 1, "queued": 3} and shown["status"] == "running"


# Ten parameters of two edge values: 1,024 combinations, more than are all checked. Each value
# is valid alone; adam with momentum is not (a quarter of the combinations).
MOMENTUM = {
    "optimizer.name": {"type": "categorical", "choices": ["adam", "sgd"]},
    "optimizer.momentum": {"type": "categorical", "choices": [0.0, 0.9]},
    **dict(list(hostile.TWO_EACH.items())[:8]),
}
SGD = {**hostile.BASE, "optimizer": {"name": "sgd"}}


def test_more_edge_combinations_than_are_all_checked_are_sampled_not_a_500(
    clients: Client,
) -> None:
    key = make_key("alice")
    alice = clients(key)
    body = sweep(SGD, MOMENTUM, sampler={"name": "random", "seed": 3}, max_trials=12)
    response = alice.post("/v1/sweeps", json={**body, "max_parallel": 12})
    assert response.status_code == 422, response.text
    assert "together" in response.json()["detail"]
    assert {"parameters.optimizer.name", "parameters.optimizer.momentum"} <= set(fields(response))
    assert alice.get("/v1/sweeps").json()["items"] == []
    # Stored anyway (before the check, or missed by its sample): its bad trials fail, no 500.
    sweep_id = stored_directly({**body, "max_parallel": 12, "max_failed_trials": 20}, key)
    jobs = sweep_jobs(sweep_id)
    failed = [j for j in jobs if j.status == JobStatus.failed]
    assert len(jobs) == 12 and failed
    assert all(j.spec["optimizer"]["name"] == "adam" for j in failed)
    assert all("momentum" in (j.error or "") for j in failed)
    assert alice.get(f"/v1/sweeps/{sweep_id}").status_code == 200


def test_one_broken_sweep_never_stops_the_round_for_the_others(clients: Client) -> None:
    alice, bob = make_key("alice"), make_key("bob")
    clients(alice)
    good = stored_directly(sweep(hostile.BASE, RATE, max_parallel=1), bob)
    with session_scope() as session:
        unreadable = {"max_parallel": 2, "max_trials": 4}  # a spec this version cannot load
        broken = rows.create_sweep(session, "old", unreadable, key_id(alice))
        broken_id = broken.id
        (trial,) = session.scalars(select(Job).where(Job.sweep_id == good)).all()
        crud.request_cancel(session, trial)  # an end no event reported: the round must see it
    with session_scope() as session:
        assert sweeps.top_up_unfinished(session) == 1  # the good one; the broken one fails
    assert [j.status for j in sweep_jobs(good)].count(JobStatus.queued) == 1
    with session_scope() as session:
        failed = session.get(Sweep, broken_id)
        assert failed is not None and failed.status == "failed"
        assert failed.finished_at is not None
        assert "could not be topped up" in (failed.error or "")
        assert sweeps.top_up_unfinished(session) == 0  # a failed sweep costs nothing more


def test_a_capped_keys_job_or_sweep_asking_no_priority_runs_at_the_cap(clients: Client) -> None:
    low, high = make_key("low"), make_key("high")
    cap(low, 10)
    cap(high, 80)
    capped = clients(low)
    job = capped.post("/v1/jobs", json=hostile.BASE)
    assert job.status_code == 201, job.text
    assert job.json()["priority"] == 10
    assert capped.post("/v1/jobs", json={**hostile.BASE, "priority": 20}).status_code == 403
    made = capped.post("/v1/sweeps", json=sweep(hostile.BASE, RATE, max_parallel=1))
    assert made.status_code == 201, made.text
    assert made.json()["spec"]["priority"] == 10
    assert [j.priority for j in sweep_jobs(made.json()["id"])] == [10]
    assert clients(high).post("/v1/jobs", json=hostile.BASE).json()["priority"] == 50


def test_a_keys_unfinished_sweeps_are_bounded(
    clients: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_MAX_OPEN_SWEEPS_PER_KEY", "2")
    alice, bob = clients(make_key("alice")), clients(make_key("bob"))
    made = [alice.post("/v1/sweeps", json=sweep(hostile.BASE, RATE)) for _ in range(2)]
    assert [m.status_code for m in made] == [201, 201]
    third = alice.post("/v1/sweeps", json=sweep(hostile.BASE, RATE))
    assert third.status_code == 429, third.text
    assert "EPOCHAL_MAX_OPEN_SWEEPS_PER_KEY" in third.json()["detail"]
    assert bob.post("/v1/sweeps", json=sweep(hostile.BASE, RATE)).status_code == 201
    assert alice.post(f"/v1/sweeps/{made[0].json()['id']}/cancel").status_code == 200
    assert alice.post("/v1/sweeps", json=sweep(hostile.BASE, RATE)).status_code == 201


def test_a_sweep_waiting_on_its_keys_limit_is_not_topped_up_until_a_job_ends(
    clients: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY", "1")
    alice = clients(make_key("alice"))
    job = alice.post("/v1/jobs", json=hostile.BASE).json()["id"]
    body = alice.post("/v1/sweeps", json=sweep(hostile.BASE, RATE)).json()
    assert body["trials_launched"] == 0 and body["wait_reason"]
    for _ in range(3):  # each round once cost a whole top-up (Optuna's study read) per sweep
        with session_scope() as session:
            assert sweeps.top_up_unfinished(session) == 0
    assert alice.post(f"/v1/jobs/{job}/cancel").status_code == 200
    with session_scope() as session:
        assert sweeps.top_up_unfinished(session) == 1
    assert alice.get(f"/v1/sweeps/{body['id']}").json()["trials_launched"] == 1


def test_one_key_holds_one_sweep_validation_slot_at_a_time() -> None:
    from app.api.routes.sweeps import SUBMITS

    started: list[str] = []
    release = threading.Event()

    def slow(name: str) -> Callable[[], str]:
        def work() -> str:  # a body whose space takes seconds to check
            started.append(name)
            release.wait(10)
            return name

        return work

    async def main() -> tuple[list[str], list[str]]:
        first = asyncio.create_task(SUBMITS.run(slow("a1"), owner="a"))
        second = asyncio.create_task(SUBMITS.run(slow("a2"), owner="a"))
        await asyncio.sleep(0.1)
        other = asyncio.create_task(SUBMITS.run(slow("b"), owner="b"))
        for _ in range(100):  # until two works hold the two slots
            if len(started) == 2:
                break
            await asyncio.sleep(0.02)
        running = sorted(started)
        release.set()
        return running, list(await asyncio.gather(first, second, other))

    running, done = asyncio.run(main())
    assert running == ["a1", "b"]  # the other key's body did not wait behind a second of a's
    assert done == ["a1", "a2", "b"]


def test_a_database_error_however_wrapped_never_fails_a_sweep() -> None:
    import optuna
    from pydantic import ValidationError
    from sqlalchemy.exc import OperationalError

    def wrapped() -> BaseException:  # what Optuna's storage raises when the database is away
        try:
            try:
                raise OperationalError("SELECT 1", {}, Exception("database is locked"))
            except OperationalError as exc:
                raise optuna.exceptions.StorageInternalError("commit failed") from exc
        except optuna.exceptions.StorageInternalError as exc:
            return exc

    assert sweeps._transient(wrapped())
    assert sweeps._transient(OSError("no space left"))
    with pytest.raises(ValidationError) as unreadable:
        SweepSpec.model_validate({"max_parallel": 2})
    assert not sweeps._transient(unreadable.value)  # the sweep's own: failed, the others go on
