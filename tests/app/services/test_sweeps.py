"""Sweeps in-process on the embedded default: the 422s of a bad space, trials as ordinary
jobs, the controller's top-ups under its lock, cancel. Real Optuna; no training (the e2e tests
in tests/e2e/test_sweeps.py train real trials on real workers)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.db import session_scope
from app.domain import crud, epoch_rows
from app.domain.states import JobStatus
from app.domain.sweep_space import space_errors
from app.domain.tables import Job
from app.schemas.sweep import SweepSpec
from app.services import sweeps
from epochal_client.cli import load_spec
from tests.conftest import make_key
from tests.helpers import ROOT

BASE: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "training": {"epochs": 4, "batch_size": 32},
}


def sweep_body(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "lr-search",
        "base": BASE,
        "parameters": {
            "optimizer.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
            "model.hidden_units": {"type": "categorical", "choices": [[32], [64, 32]]},
        },
        "objective": {"metric": "val_accuracy"},
        "sampler": {"name": "random", "seed": 7},
        "max_trials": 4,
        "max_parallel": 2,
        **overrides,
    }


@pytest.fixture
def client(sqlite_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('sweeper')}"
        yield test_client


def fields(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return [e["field"] for e in response.json()["errors"]]


def dist(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


# On digits (8x8x1): two convolutions and global average pooling.
CONVS: dict[str, Any] = {
    "type": "graph",
    "layers": [
        {"name": "c0", "op": "conv2d", "filters": 4},
        {"name": "c1", "op": "conv2d", "filters": 4},
        {"name": "gap", "op": "global_avg_pool"},
    ],
}
DENSE: dict[str, Any] = {
    "type": "graph",
    "layers": [{"name": "flat", "op": "flatten"}, {"name": "d0", "op": "dense", "units": 8}],
}

BAD_SPACES = [  # (path, distribution, base overrides)
    ("optimizer.learning_rte", dist("uniform", low=0.1, high=0.2), {}),
    ("optimizer.learning_rate", dist("loguniform", low=1e-3, high=20), {}),
    ("model.dropout", dist("uniform", low=0.0, high=0.95), {}),
    ("model.activation", dist("categorical", choices=["relu", "swish"]), {}),
    ("training.batch_size", dist("int", low=16, high=18), {"resources": {"replicas": 2}}),
    ("training.epochs", dist("int", low=0, high=3), {}),
    ("lr_scheduler", dist("categorical", choices=[None, {"name": "step", "gamma": 2.0}]), {}),
    ("model.layers.3.filters", dist("int", low=2, high=8), {"model": CONVS}),  # no 4th node
    ("model.layers.1.filters", dist("int", low=2, high=5000), {"model": CONVS}),  # > 1024
    ("model.layers.2.filters", dist("int", low=2, high=8), {"model": CONVS}),  # gap has none
    ("model.layers.c1.filters", dist("int", low=2, high=8), {"model": CONVS}),  # not an index
    ("model.layers.1.filters", dist("int", low=2, high=8), {}),  # an mlp has no layers
]


@pytest.mark.parametrize(("named", "distribution", "base"), BAD_SPACES)
def test_a_space_that_can_make_an_invalid_job_is_a_422_naming_the_parameter(
    client: TestClient, named: str, distribution: dict[str, Any], base: dict[str, Any]
) -> None:
    body = sweep_body(parameters={named: distribution}, base={**BASE, **base})
    assert fields(client.post("/v1/sweeps", json=body)) == [f"parameters.{named}"]
    assert client.get("/v1/sweeps").json()["items"] == []
    assert client.get("/v1/jobs").json()["items"] == []


def test_a_path_past_the_last_node_says_how_many_there_are(client: TestClient) -> None:
    body = sweep_body(
        parameters={"model.layers.3.filters": dist("int", low=2, high=8)},
        base={**BASE, "model": CONVS},
    )
    response = client.post("/v1/sweeps", json=body)
    assert fields(response) == ["parameters.model.layers.3.filters"]
    assert "model.layers has 3 entries (0 to 2); there is no entry 3" in response.json()["detail"]
    body["parameters"] = {"model.layers.2.filters": dist("int", low=2, high=8)}
    named = client.post("/v1/sweeps", json=body).json()["detail"]
    assert "layer 2 'gap' (global_avg_pool)" in named and "Extra inputs" in named


def test_a_sweep_sets_a_nodes_field_by_its_index(client: TestClient) -> None:
    body = sweep_body(
        base={**BASE, "model": CONVS},
        parameters={"model.layers.1.filters": dist("int", low=2, high=16, step=2)},
        sampler={"name": "random", "seed": 3},
        max_parallel=4,
    )
    sweep = client.post("/v1/sweeps", json=body).json()
    assert sweep["trials_launched"] == 4, sweep
    drawn = []
    for trial in sweep["trials"]:
        job = client.get(f"/v1/jobs/{trial['job_id']}").json()
        layers = job["spec"]["model"]["layers"]
        filters = trial["params"]["model.layers.1.filters"]
        assert layers[1]["filters"] == filters and filters in range(2, 17, 2)
        assert [layer["filters"] for layer in layers[:1]] == [4]  # the other nodes as in base
        shapes = {x["name"]: x["output_shape"] for x in job["model_summary"]["layers"]}
        assert shapes["c1"] == [8, 8, filters] and shapes["gap"] == [filters]
        drawn.append(filters)
    assert len(set(drawn)) > 1  # the trials differ as the space asks


def test_a_sweep_chooses_between_whole_graphs(client: TestClient) -> None:
    body = sweep_body(
        base={**BASE, "model": CONVS},
        parameters={"model": dist("categorical", choices=[CONVS, DENSE])},
        sampler={"name": "grid"},
    )
    sweep = client.post("/v1/sweeps", json=body).json()
    assert sweep["trials_launched"] == 2, sweep
    jobs = [client.get(f"/v1/jobs/{t['job_id']}").json() for t in sweep["trials"]]
    names = {tuple(x["name"] for x in job["spec"]["model"]["layers"]) for job in jobs}
    assert names == {("c0", "c1", "gap"), ("flat", "d0")}
    summaries = {tuple(x["name"] for x in job["model_summary"]["layers"]) for job in jobs}
    assert summaries == {("c0", "c1", "gap", "head"), ("flat", "d0", "head")}
    chosen = [t["params"]["model"]["layers"][0]["name"] for t in sweep["trials"]]
    assert sorted(chosen) == ["c0", "flat"]


def test_parameters_valid_alone_but_not_together_are_both_named(client: TestClient) -> None:
    parameters = {
        "optimizer.name": {"type": "categorical", "choices": ["adam", "sgd"]},
        "optimizer.momentum": {"type": "uniform", "low": 0.0, "high": 0.9},
    }
    base = {**BASE, "optimizer": {"name": "sgd"}}
    named = fields(client.post("/v1/sweeps", json=sweep_body(parameters=parameters, base=base)))
    assert named == ["parameters.optimizer.momentum", "parameters.optimizer.name"]


def test_objective_and_grid_mistakes_are_422s(client: TestClient) -> None:
    no_split = {**BASE, "dataset": {"name": "digits", "validation_split": 0.0}}
    assert fields(client.post("/v1/sweeps", json=sweep_body(base=no_split))) == ["objective.metric"]
    grid = sweep_body(sampler={"name": "grid"})
    assert fields(client.post("/v1/sweeps", json=grid)) == ["parameters.optimizer.learning_rate"]
    bad_pruner = sweep_body(pruner={"name": "median", "params": {"reduction_factor": 3}})
    assert client.post("/v1/sweeps", json=bad_pruner).status_code == 422


def run_trial(job_id: str, epochs: int, accuracy: float, stop_reason: str = "completed") -> None:
    """What a worker does with a trial, without training: claim, epoch rows, finish."""
    with session_scope() as session:
        job = crud.claim_job(session, job_id, "w", 60)
        assert job is not None
        for epoch in range(1, epochs + 1):
            epoch_rows.record_epoch(session, job_id, 1, epoch, {"val_accuracy": accuracy})
        crud.finish_job(
            session, job_id, 1, JobStatus.succeeded, stop_reason=stop_reason, reason="done"
        )


def test_trials_are_jobs_and_each_end_queues_the_next(client: TestClient) -> None:
    response = client.post("/v1/sweeps", json=sweep_body())
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert sweep["status"] == "running" and sweep["trials_launched"] == 2
    assert [t["state"] for t in sweep["trials"]] == ["queued", "queued"]
    listed = client.get("/v1/jobs", params={"sweep_id": sweep["id"]}).json()["items"]
    assert {j["id"] for j in listed} == {t["job_id"] for t in sweep["trials"]}
    assert all(j["sweep_id"] == sweep["id"] for j in listed)
    for trial in sweep["trials"]:
        job = client.get(f"/v1/jobs/{trial['job_id']}").json()
        rate = trial["params"]["optimizer.learning_rate"]
        assert job["spec"]["optimizer"]["learning_rate"] == rate and 1e-4 <= rate <= 1e-1
        assert job["spec"]["model"]["hidden_units"] in ([32], [64, 32])

    first, second = sweep["trials"]
    run_trial(first["job_id"], 4, 0.9)
    sweeps.trial_ended(sweep["id"])
    run_trial(second["job_id"], 2, 0.5, stop_reason="pruned")
    sweeps.trial_ended(sweep["id"])
    sweep = client.get(f"/v1/sweeps/{sweep['id']}").json()
    assert [t["state"] for t in sweep["trials"]] == ["complete", "pruned", "queued", "queued"]
    assert [t["number"] for t in sweep["trials"]] == [0, 1, 2, 3]
    assert sweep["best"]["job_id"] == first["job_id"] and sweep["best"]["objective"] == 0.9
    assert sweep["epochs_spent"] == 6 and sweep["epochs_full"] == 16
    assert sweep["counts"] == {"complete": 1, "pruned": 1, "queued": 2}

    cancelled = client.post(f"/v1/sweeps/{sweep['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"] is not None
    assert cancelled["counts"] == {"complete": 1, "pruned": 1, "cancelled": 2}
    assert client.post(f"/v1/sweeps/{sweep['id']}/cancel").status_code == 409
    with session_scope() as session:
        assert sweeps.top_up_unfinished(session) == 0


def test_concurrent_top_ups_never_queue_more_than_max_parallel(client: TestClient) -> None:
    sweep = client.post("/v1/sweeps", json=sweep_body(max_parallel=3, max_trials=10)).json()
    for trial in sweep["trials"]:
        run_trial(trial["job_id"], 1, 0.5)
    threads = [threading.Thread(target=sweeps.trial_ended, args=(sweep["id"],)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with session_scope() as session:
        jobs = session.query(Job).filter(Job.sweep_id == sweep["id"]).all()
        numbers = sorted(j.sweep_trial for j in jobs)
        queued = [j for j in jobs if j.status == JobStatus.queued]
    assert numbers == list(range(6)) and len(queued) == 3


def test_other_owners_see_no_sweep(client: TestClient) -> None:
    sweep = client.post("/v1/sweeps", json=sweep_body()).json()
    other = {"Authorization": f"Bearer {make_key('someone-else')}"}
    assert client.get(f"/v1/sweeps/{sweep['id']}", headers=other).status_code == 404
    assert client.post(f"/v1/sweeps/{sweep['id']}/cancel", headers=other).status_code == 404
    assert client.get("/v1/sweeps", headers=other).json()["items"] == []
    assert client.get("/v1/sweeps").json()["items"][0]["id"] == sweep["id"]


@pytest.mark.parametrize(
    "path", sorted((ROOT / "examples" / "sweeps").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_example_sweep_is_sound(path: Path) -> None:
    spec = SweepSpec.model_validate_json(json.dumps(load_spec(path, [])))
    assert space_errors(spec) == []


def test_there_is_an_example_sweep_for_each_framework() -> None:
    paths = sorted((ROOT / "examples" / "sweeps").glob("*.yaml"))
    frameworks = {load_spec(p, [])["base"]["framework"] for p in paths}
    assert frameworks == {"pytorch", "tensorflow"}


@pytest.mark.parametrize("pruner", ["none", "median", "successive_halving", "hyperband"])
@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
def test_every_sampler_and_pruner_is_built_and_draws(
    sqlite_env: dict[str, str], sampler: str, pruner: str
) -> None:
    from app.services import sweep_study

    params = {"reduction_factor": 3} if pruner in ("successive_halving", "hyperband") else {}
    body = sweep_body(
        sampler={"name": sampler, "seed": 1},
        pruner={"name": pruner, "params": params, "min_epochs": 2},
        parameters={"model.hidden_units": dist("categorical", choices=[[8], [16, 8]])},
    )
    spec = SweepSpec.model_validate_json(json.dumps(body))
    sweep_study.ensure_tables()
    study = sweep_study.open_study(f"{sampler}-{pruner}", spec)
    trial = study.ask(sweep_study.distributions(spec))
    drawn = sweep_study.decode(spec, trial.params)["model.hidden_units"]
    assert drawn in ([8], [16, 8])
    assert sweeps.trial_limit(spec) == (2 if sampler == "grid" else 4)
