"""Warm start and freezing at submit, on SQLite and PostgreSQL: init's source job and nodes
checked by name, op and shapes (each refusal a 422 naming the node, another key's job a 404),
"matching" resolved into the stored spec, the summary's frozen parameters, and lr_multiplier's
bounds and its refusal on a layer that does not train."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.db import session_scope
from app.domain.tables import Job
from tests.conftest import make_key

LAYERS: list[dict[str, Any]] = [
    {"name": "stem", "op": "conv2d", "filters": 4, "kernel_size": 3},
    {"name": "bn", "op": "batch_norm"},
    {"name": "act", "op": "activation", "fn": "relu"},
    {"name": "s1c1", "op": "conv2d", "filters": 4},
    {"name": "gap", "op": "global_avg_pool"},
]


def spec(layers: list[dict[str, Any]], dataset: str = "fashion_mnist", **more: Any) -> dict:
    model = {"type": "graph", "layers": layers}
    return {"framework": "pytorch", "dataset": {"name": dataset}, "model": model, **more}


@pytest.fixture
def client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('warm')}"
        yield test_client


def finished(client: TestClient, body: dict[str, Any], **result: Any) -> str:
    """A job submitted, then marked succeeded as a worker would leave it."""
    created = client.post("/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    done = {"best_epoch": 2, "stopped_epoch": 2, "restored_best_weights": False} | result
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status="succeeded", result=done))
    return str(job_id)


def refusal(client: TestClient, body: dict[str, Any], status: int = 422) -> dict[str, Any]:
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    return dict(answer.json())


def test_matching_takes_the_nodes_that_fit_and_the_head_only_for_the_same_classes(
    client: TestClient,
) -> None:
    source = finished(client, spec(LAYERS))
    same = client.post("/v1/jobs", json=spec(LAYERS, init={"from_job": source}))
    assert same.status_code == 201, same.text
    assert same.json()["spec"]["init"] == {
        "from_job": source,
        "nodes": ["stem", "bn", "s1c1", "head"],
        "checkpoint": "last",
    }
    wider = [*LAYERS[:3], {"name": "s1c1", "op": "conv2d", "filters": 8}, LAYERS[4]]
    # digits: 8x8 images (a conv's kernel does not care) and ten unnamed classes, not
    # Fashion-MNIST's named ones: the head starts fresh, as does the wider s1c1
    other = client.post("/v1/jobs", json=spec(wider, "digits", init={"from_job": source}))
    assert other.status_code == 201, other.text
    assert other.json()["spec"]["init"]["nodes"] == ["stem", "bn"]


def test_every_node_named_must_fit_and_each_refusal_names_it(client: TestClient) -> None:
    source = finished(client, spec(LAYERS))
    wider = [*LAYERS[:3], {"name": "s1c1", "op": "conv2d", "filters": 8}, LAYERS[4]]
    init = {"from_job": source, "nodes": ["stem", "nope", "s1c1", "head"]}
    problem = refusal(client, spec(wider, "digits", init=init))
    by_field = {e["field"]: e["msg"] for e in problem["errors"]}
    assert set(by_field) == {"init.nodes.1", "init.nodes.2", "init.nodes.3"}
    assert "'nope'" in by_field["init.nodes.1"] and "not a node" in by_field["init.nodes.1"]
    shapes = by_field["init.nodes.2"]
    assert "'s1c1'" in shapes and "(3, 3, 4, 8)" in shapes and "(3, 3, 4, 4)" in shapes
    assert source in shapes
    assert "'head'" in by_field["init.nodes.3"] and "(8, 10)" in by_field["init.nodes.3"]
    classes = refusal(client, spec(LAYERS, "digits", init={"from_job": source, "nodes": ["head"]}))
    assert "'head'" in classes["detail"] and "'T-shirt/top'" in classes["detail"]
    renamed = [{**LAYERS[0], "op": "conv2d"}, {"name": "bn", "op": "layer_norm"}, *LAYERS[2:]]
    op = refusal(client, spec(renamed, init={"from_job": source, "nodes": ["bn"]}))
    assert "a layer_norm here, a batch_norm in job" in op["errors"][0]["msg"]


def test_the_source_must_be_a_succeeded_job_of_the_key(client: TestClient) -> None:
    queued = client.post("/v1/jobs", json=spec(LAYERS)).json()["id"]
    problem = refusal(client, spec(LAYERS, init={"from_job": queued}))
    assert problem["errors"][0]["field"] == "init.from_job"
    assert f"job {queued} is queued" in problem["errors"][0]["msg"]
    source = finished(client, spec(LAYERS))
    client.headers["Authorization"] = f"Bearer {make_key('stranger')}"
    hidden = refusal(client, spec(LAYERS, init={"from_job": source}), status=404)
    assert hidden["detail"] == f"no job {source}"
    missing = refusal(client, spec(LAYERS, init={"from_job": "no-such-job"}), status=404)
    assert missing["detail"] == "no job no-such-job"


def test_the_epoch_asked_for_must_be_the_one_the_source_kept(client: TestClient) -> None:
    source = finished(client, spec(LAYERS), best_epoch=1, stopped_epoch=3)
    best = {"from_job": source, "checkpoint": "best"}
    problem = refusal(client, spec(LAYERS, init=best))
    assert problem["errors"][0]["field"] == "init.checkpoint"
    assert "last epoch's (3)" in problem["errors"][0]["msg"]
    last = client.post("/v1/jobs", json=spec(LAYERS, init={"from_job": source}))
    assert last.status_code == 201, last.text
    restored = finished(
        client, spec(LAYERS), best_epoch=1, stopped_epoch=3, restored_best_weights=True
    )
    assert (
        client.post("/v1/jobs", json=spec(LAYERS, init=best | {"from_job": restored})).status_code
        == 201
    )
    assert (
        "ask for checkpoint best"
        in refusal(client, spec(LAYERS, init={"from_job": restored}))["detail"]
    )


def sweep(base: dict[str, Any], filters: list[int]) -> dict[str, Any]:
    """Every trial at once, one per width of s1c1 (the fourth node), in order."""
    return {
        "base": base,
        "parameters": {"model.layers.3.filters": {"type": "categorical", "choices": filters}},
        "sampler": {"name": "grid", "seed": 1},
        "max_trials": len(filters),
        "max_parallel": len(filters),
    }


def trials(client: TestClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep's trials, by width, each with its job."""
    answer = client.post("/v1/sweeps", json=body)
    assert answer.status_code == 201, answer.text
    found = [
        t | {"job": client.get(f"/v1/jobs/{t['job_id']}").json()} for t in answer.json()["trials"]
    ]
    return sorted(found, key=lambda t: t["params"]["model.layers.3.filters"])


def test_a_sweeps_trials_each_warm_start_from_the_bases_init(client: TestClient) -> None:
    source = finished(client, spec(LAYERS))
    named = {"from_job": source, "nodes": ["stem", "bn", "s1c1"]}
    same, wider = trials(client, sweep(spec(LAYERS, init=named), [4, 8]))
    assert same["state"] == "queued"
    assert same["job"]["spec"]["init"] == named | {"checkpoint": "last"}
    # the drawn width no longer fits a node the base names: that trial fails, saying why
    assert (wider["state"], wider["job"]["error_code"]) == ("failed", "invalid_config")
    why = wider["job"]["error"]
    assert "init.nodes.2" in why and "'s1c1'" in why and source in why
    assert "(3, 3, 4, 8)" in why and "(3, 3, 4, 4)" in why
    # "matching" is resolved for each trial's own graph
    matching = spec(LAYERS, init={"from_job": source})
    same, wider = trials(client, sweep(matching, [4, 8]))
    assert same["job"]["spec"]["init"]["nodes"] == ["stem", "bn", "s1c1", "head"]
    assert wider["job"]["spec"]["init"]["nodes"] == ["stem", "bn"]  # its head is (8, 10)
    assert {same["state"], wider["state"]} == {"queued"}


def test_a_sweeps_init_is_checked_at_submit_as_a_jobs_is(client: TestClient) -> None:
    source = finished(client, spec(LAYERS))
    wider = [*LAYERS[:3], {"name": "s1c1", "op": "conv2d", "filters": 8}, LAYERS[4]]
    init = {"from_job": source, "nodes": ["stem", "s1c1"]}
    answer = client.post("/v1/sweeps", json=sweep(spec(wider, init=init), [8, 16]))
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]
    assert error["field"] == "base.init.nodes.1" and "'s1c1'" in error["msg"]
    assert "(3, 3, 4, 8)" in error["msg"] and "(3, 3, 4, 4)" in error["msg"]
    queued = client.post("/v1/jobs", json=spec(LAYERS)).json()["id"]
    answer = client.post("/v1/sweeps", json=sweep(spec(LAYERS, init={"from_job": queued}), [4]))
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "base.init.from_job"
    assert f"job {queued} is queued" in answer.json()["errors"][0]["msg"]
    body = sweep(spec(LAYERS, training={"epochs": 4}, continues=source), [4])
    answer = client.post("/v1/sweeps", json=body)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "base.continues"
    client.headers["Authorization"] = f"Bearer {make_key('stranger')}"
    hidden = client.post("/v1/sweeps", json=sweep(spec(LAYERS, init={"from_job": source}), [4]))
    assert hidden.status_code == 404 and hidden.json()["detail"] == f"no job {source}"
    assert client.get("/v1/sweeps").json()["items"] == []


def test_the_summary_counts_frozen_parameters_apart(client: TestClient) -> None:
    frozen = [{**LAYERS[0], "trainable": False}, {**LAYERS[1], "trainable": False}, *LAYERS[2:]]
    job = client.post("/v1/jobs", json=spec(frozen))
    assert job.status_code == 201, job.text
    summary = job.json()["model_summary"]
    layers = {x["name"]: (x["parameters"], x["frozen_parameters"]) for x in summary["layers"]}
    assert layers["stem"] == (0, 40) and layers["bn"] == (0, 8) and layers["s1c1"] == (148, 0)
    assert summary["frozen_parameters"] == 48 and summary["parameters"] == 148 + 50
    nothing = [*LAYERS[:2], {**LAYERS[2], "trainable": False}, *LAYERS[3:]]
    problem = refusal(client, spec(nothing))
    assert (
        "activation 'act'" in problem["detail"] and "no parameters to freeze" in problem["detail"]
    )


def test_an_lr_multiplier_is_bounded_and_only_for_a_layer_that_trains(client: TestClient) -> None:
    slow = [{**LAYERS[0], "lr_multiplier": 0.1}, *LAYERS[1:]]
    job = client.post("/v1/jobs", json=spec(slow))
    assert job.status_code == 201, job.text
    assert job.json()["spec"]["model"]["layers"][0]["lr_multiplier"] == 0.1
    for bad, words in ((0, "greater than 0"), (101, "less than or equal to 100")):
        problem = refusal(client, spec([{**LAYERS[0], "lr_multiplier": bad}, *LAYERS[1:]]))
        error = problem["errors"][0]
        assert error["field"].endswith("lr_multiplier"), error
        assert "layer 0 'stem' (conv2d)" in error["msg"] and words in error["msg"], error
    act = [*LAYERS[:2], {**LAYERS[2], "lr_multiplier": 2}, *LAYERS[3:]]
    problem = refusal(client, spec(act))
    assert "activation 'act': has no parameters: lr_multiplier 2" in problem["detail"], problem


def test_continue_makes_a_job_that_goes_on_from_the_last_epoch(client: TestClient) -> None:
    body = spec(LAYERS, training={"epochs": 5}, init=None)
    source = finished(client, body, best_epoch=5, stopped_epoch=5)
    answer = client.post(f"/v1/jobs/{source}/continue", json={"epochs": 5})
    assert answer.status_code == 201, answer.text
    continued = answer.json()["spec"]
    assert continued["continues"] == source and continued["training"]["epochs"] == 10
    assert continued["model"] == client.get(f"/v1/jobs/{source}").json()["spec"]["model"]
    queued = client.post("/v1/jobs", json=body).json()["id"]
    early = client.post(f"/v1/jobs/{queued}/continue", json={"epochs": 5})
    assert early.status_code == 409 and "queued" in early.json()["detail"]
    too_many = client.post(f"/v1/jobs/{source}/continue", json={"epochs": 1000})
    assert too_many.status_code == 422, too_many.text
    assert too_many.json()["errors"][0]["field"] == "training.epochs"
    done = refusal(client, spec(LAYERS, training={"epochs": 5}, continues=source))
    assert "trained 5 epochs already" in done["errors"][0]["msg"]
    other = refusal(client, spec(LAYERS[:-1], training={"epochs": 8}, continues=source))
    assert done["errors"][0]["field"] == other["errors"][0]["field"] == "continues"
    assert "another framework or model" in other["errors"][0]["msg"]
    both = spec(LAYERS, training={"epochs": 8}, continues=source, init={"from_job": source})
    assert refusal(client, both)["errors"][0]["field"] == "init"
    client.headers["Authorization"] = f"Bearer {make_key('stranger')}"
    assert client.post(f"/v1/jobs/{source}/continue", json={"epochs": 1}).status_code == 404
    hidden = refusal(client, spec(LAYERS, training={"epochs": 8}, continues=source), status=404)
    assert hidden["detail"] == f"no job {source}"


def test_continue_may_change_what_the_checkpoint_does_not_fix(client: TestClient) -> None:
    patience = {"monitor": "val_accuracy", "patience": 1}
    body = spec(LAYERS, training={"epochs": 3}, early_stopping=patience, tags={"run": "1"})
    source = finished(client, body, best_epoch=1, stopped_epoch=2)
    changes = {
        "name": "longer",
        "tags": {"run": "2"},
        "priority": 3,
        "max_runtime_seconds": 600,
        "early_stopping": {"patience": 4},
        "dataset": {"name": "fashion_mnist", "limit": 1000},
    }
    answer = client.post(f"/v1/jobs/{source}/continue", json={"epochs": 2, **changes})
    assert answer.status_code == 201, answer.text
    made = answer.json()["spec"]
    assert made["continues"] == source and made["training"]["epochs"] == 4
    assert (made["name"], made["tags"], made["priority"]) == ("longer", {"run": "2"}, 3)
    assert made["max_runtime_seconds"] == 600 and made["dataset"]["limit"] == 1000
    assert made["early_stopping"] == {**made["early_stopping"], **patience, "patience": 4}
    plain = client.post(f"/v1/jobs/{source}/continue", json={"epochs": 1}).json()["spec"]
    assert (plain["name"], plain["tags"]) == ("job", {"run": "1"})  # the source's


def test_continue_refuses_what_the_checkpoint_fixes_naming_the_field(client: TestClient) -> None:
    source = finished(client, spec(LAYERS, training={"epochs": 2}))

    def refused(**changes: Any) -> dict[str, Any]:
        answer = client.post(f"/v1/jobs/{source}/continue", json={"epochs": 1, **changes})
        assert answer.status_code == 422, answer.text
        return dict(answer.json()["errors"][0])

    for field, value in [
        ("optimizer", {"name": "sgd", "learning_rate": 0.1}),
        ("model", {"type": "graph", "layers": LAYERS[:2]}),
        ("framework", "tensorflow"),
        ("resources", {"gpus": 1}),
    ]:
        error = refused(**{field: value})
        assert error["field"] == field and "stays the source job's" in error["msg"], error
    assert refused(bogus=1)["field"] == "bogus"
    error = refused(early_stopping={"patience": 3})
    assert error["field"] == "early_stopping" and "has no early stopping" in error["msg"]
    assert refused(priority=10**6)["field"] == "priority"
    # digits: other classes than Fashion-MNIST's, so the head's checkpoint would not fit
    error = refused(dataset={"name": "digits"})
    assert error["field"] == "dataset" and "'head'" in error["msg"] and source in error["msg"]
