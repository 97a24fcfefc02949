"""Sweep limits, in-process on both databases: a sweep's space is checked in bounded
time and memory, a choice cannot name another key's upload, and trials count against the
key's active-job limit and storage quota (the sweep waits, saying why, instead of failing)."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain.admission import data_of, disk_estimate
from app.domain.keys import Caller
from app.domain.sweep_space import MAX_EDGE_VALUES, grid_size, space_errors
from app.domain.tables import Job
from app.schemas.job_spec import JobSpec
from app.schemas.sweep import SweepSpec
from app.services import sweeps
from tests import hostile
from tests.app.api.test_datasets import images, npz, upload
from tests.conftest import make_key

Client = Callable[[str], TestClient]
RATE = {"optimizer.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-1}}


@pytest.fixture
def clients(db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """A TestClient per key over one app; settings the test sets before its first call."""
    from app.main import create_app

    opened: list[TestClient] = []
    app: list[Any] = []

    def client_for(key: str) -> TestClient:
        if not app:
            get_settings.cache_clear()
            app.append(create_app())
        client = TestClient(app[0], raise_server_exceptions=False)
        client.__enter__()
        client.headers["Authorization"] = f"Bearer {key}"
        opened.append(client)
        return client

    yield client_for
    for client in opened:
        client.__exit__(None, None, None)


JSON = {"content-type": "application/json"}


def json_of(body: Any) -> bytes:
    """`body` as JSON however deep (the test client's encoder recurses)."""
    import json
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        return json.dumps(body).encode()
    finally:
        sys.setrecursionlimit(limit)


def sweep(base: dict[str, Any], parameters: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"base": base, "parameters": parameters, "max_trials": 6, "max_parallel": 4, **more}


def fields(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    return [e["field"] for e in response.json()["errors"]]


def test_a_choice_naming_another_keys_upload_is_refused_like_the_base(clients: Client) -> None:
    alice, bob = clients(make_key("alice")), clients(make_key("bob"))
    mine = upload(alice, npz(**images())).json()["id"]
    also_mine = upload(alice, npz(**images(seed=1))).json()["id"]
    theirs = upload(bob, npz(**images(seed=2))).json()["id"]
    base = {**hostile.BASE, "dataset": {"id": mine}}
    spaces = [
        {"dataset.id": {"type": "categorical", "choices": [also_mine, theirs]}},
        {"dataset": {"type": "categorical", "choices": [{"id": mine}, {"id": theirs}]}},
    ]
    for space in spaces:
        response = alice.post("/v1/sweeps", json=sweep(base, space))
        assert fields(response) == [f"parameters.{next(iter(space))}"]
        assert f"no uploaded data set {theirs} for this key" in response.json()["detail"]
    assert alice.get("/v1/sweeps").json()["items"] == []
    assert alice.get("/v1/jobs").json()["items"] == []
    own = {"dataset.id": {"type": "categorical", "choices": [mine, also_mine]}}
    assert alice.post("/v1/sweeps", json=sweep(base, own)).status_code == 201
    admin = clients(make_key("admin", admin=True))
    assert admin.post("/v1/sweeps", json=sweep(base, spaces[0])).status_code == 201


def test_admission_reads_an_upload_for_its_owner_or_an_admin_only(clients: Client) -> None:
    bob_key = make_key("bob")
    theirs = upload(clients(bob_key), npz(**images())).json()["id"]
    spec = JobSpec.model_validate({**hostile.BASE, "dataset": {"id": theirs}})
    bob_id = bob_key.split("_")[1]
    with session_scope() as session:
        assert data_of(session, spec, Caller("0123456789ab", False)) is None
        assert data_of(session, spec, Caller(bob_id, False)) is not None
        assert data_of(session, spec, Caller("0123456789ab", True)) is not None


def sweep_jobs(sweep_id: str) -> list[Job]:
    with session_scope() as session:
        return list(session.scalars(select(Job).where(Job.sweep_id == sweep_id)))


def test_trials_wait_for_the_keys_active_job_limit(
    clients: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY", "3")
    alice = clients(make_key("alice"))
    jobs = [alice.post("/v1/jobs", json=hostile.BASE).json()["id"] for _ in range(2)]
    created = alice.post("/v1/sweeps", json=sweep(hostile.BASE, RATE))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["trials_launched"] == 1  # 2 jobs + 1 trial: the key's limit of 3
    assert "EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY" in body["wait_reason"]
    assert alice.post("/v1/jobs", json=hostile.BASE).status_code == 429
    listed = alice.get("/v1/sweeps").json()["items"][0]
    assert listed["wait_reason"] == body["wait_reason"] and listed["status"] == "running"

    for job_id in jobs:  # room for two more trials
        assert alice.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    with session_scope() as session:
        sweeps.top_up_unfinished(session)
    again = alice.get(f"/v1/sweeps/{body['id']}").json()
    assert again["trials_launched"] == 3 and again["status"] == "running"
    assert len(sweep_jobs(body["id"])) == 3
    numbers = sorted(t["number"] for t in again["trials"])
    assert numbers == [0, 1, 2]  # the trials that waited keep their numbers, none is lost


def test_trials_reserve_their_files_and_wait_for_the_storage_quota(
    clients: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    with session_scope() as session:
        spec = JobSpec.model_validate(hostile.BASE)
        estimate = disk_estimate(session, spec, Caller("nobody", False))
    assert estimate
    monkeypatch.setenv("EPOCHAL_MAX_STORAGE_BYTES_PER_KEY", str(estimate * 5 // 2))
    alice = clients(make_key("alice"))
    body = alice.post("/v1/sweeps", json=sweep(hostile.BASE, RATE)).json()
    assert body["trials_launched"] == 2, body
    assert "EPOCHAL_MAX_STORAGE_BYTES_PER_KEY" in body["wait_reason"]
    assert [j.disk_bytes for j in sweep_jobs(body["id"])] == [estimate, estimate]
    assert alice.post("/v1/jobs", json=hostile.BASE).status_code == 507
    cancelled = alice.post(f"/v1/sweeps/{body['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["wait_reason"] is None


def test_a_huge_grid_is_sized_without_listing_it(db_env: dict[str, str]) -> None:
    spec = SweepSpec.model_validate(hostile.grid_over(2**31 - 1))
    tracemalloc.start()
    started = time.perf_counter()
    errors = space_errors(spec)
    took = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [e["loc"] for e in errors] == [("body", "sampler", "name")]
    assert peak < 2**20, f"{peak} bytes"  # listing 2**31 ints is ~80 GB
    assert took < 1.0  # listing them takes minutes, whatever the machine
    assert grid_size(spec) == 100_001  # capped: the real product can be astronomical


def test_a_space_with_too_many_edge_values_is_refused_before_any_is_checked(
    clients: Client,
) -> None:
    alice = clients(make_key("alice"))
    over = hostile.many_choices_sweep(5, 256)  # 1,280 values
    response = alice.post("/v1/sweeps", json=over)
    assert response.status_code == 422
    assert f"more than {MAX_EDGE_VALUES} values" in response.json()["detail"]
    within = hostile.many_choices_sweep(4, 256)  # exactly the bound
    assert alice.post("/v1/sweeps", json=within).status_code == 201


def nested(levels: int, wrap: Callable[[Any], Any]) -> Any:
    deep: Any = 32
    for _ in range(levels):
        deep = wrap(deep)
    return deep


@pytest.mark.parametrize("levels", [17, 600, 5000])
@pytest.mark.parametrize("kind", ["lists", "objects", "mixed"])
def test_a_deeply_nested_choice_is_a_422_not_a_500(clients: Client, levels: int, kind: str) -> None:
    wraps: dict[str, Callable[[Any], Any]] = {
        "lists": lambda inner: [inner],
        "objects": lambda inner: {"k": inner},
        "mixed": lambda inner: [{"k": inner}],
    }
    alice = clients(make_key("alice"))
    deep = nested(levels, wraps[kind])  # parses as JSON; copying it recursed past Python's limit
    for path in ("model.hidden_units", "dataset"):
        space = {path: {"type": "categorical", "choices": [deep]}}
        body = json_of(sweep(hostile.BASE, space))
        response = alice.post("/v1/sweeps", content=body, headers=JSON)
        assert response.headers["content-type"] == "application/problem+json"
        if levels * (2 if kind == "mixed" else 1) < 1000:  # within what Python's json parses
            assert response.status_code == 422, response.text
            assert "nests deeper than 16 levels" in response.json()["detail"]
        else:  # the parser's own recursion limit: the body cannot be read
            assert response.status_code == 400, response.text
            assert "error parsing the body" in response.json()["detail"]
