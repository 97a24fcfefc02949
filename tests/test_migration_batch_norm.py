"""Migration 0018: stored specs keep the batch-norm momentum they were submitted under (0.99),
written out, now that the field's default is 0.9; a downgrade takes the fields away again."""

from __future__ import annotations

import copy
from typing import Any

from alembic import command
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.cli import alembic_config
from app.core.db import get_engine, session_scope
from app.domain import crud
from app.domain.sweeps import create_sweep
from app.domain.tables import Job, Sweep
from app.schemas.dataset_spec import model_input
from app.schemas.job_spec import JobSpec
from app.schemas.spec_graph import built_model

BEFORE = "0017_job_memory_estimate"
GRAPH = {
    "type": "graph",
    "layers": [
        {"name": "d", "op": "dense", "units": 4},
        {"name": "bn", "op": "batch_norm"},
        {"name": "bn2", "op": "batch_norm"},
    ],
}
JOB = {"framework": "pytorch", "dataset": {"name": "digits"}}
GRAPH_JOB = {**JOB, "model": GRAPH}
SGD = {"name": "sgd", "momentum": 0.5}  # another momentum, which no step touches


def as_stored_before(body: dict[str, Any]) -> dict[str, Any]:
    """The spec as the previous revision stored it: whole, without the momentum fields."""
    spec = JobSpec.model_validate({**JOB, **body}).model_dump(mode="json")
    spec["model"].pop("batch_norm_momentum", None)
    for node in spec["model"].get("layers", []):
        if node["op"] == "batch_norm":
            del node["momentum"]
    return spec


def migrate(revision: str, up: bool) -> None:
    (command.upgrade if up else command.downgrade)(alembic_config(), revision)
    get_engine().dispose()


def stored(session: Session, table: type[Job | Sweep], row_id: str) -> dict[str, Any]:
    """The row's spec alone: at an earlier revision the table lacks columns added since."""
    spec = session.scalar(select(table.spec).where(table.id == row_id))
    assert spec is not None
    return dict(spec)


def momenta(spec: dict[str, Any]) -> list[float]:
    """The momentum of each batch norm of the built graph."""
    job = JobSpec.model_validate(spec)
    graph = built_model(job, model_input(job, (64,)), 10)
    return [n.op.momentum for n in graph.nodes if n.op.op == "batch_norm"]


def test_stored_specs_keep_the_momentum_they_ran_with(db_env: dict[str, str]) -> None:
    # The rows are written by today's code, with specs as the previous revision stored them,
    # then taken down to it and up again: the upgrade is what writes the momentum.
    bodies = {
        "graph": {"model": GRAPH, "optimizer": SGD},
        "mlp-bn": {"model": {"type": "mlp", "batch_norm": True}},
        "mlp": {"model": {"type": "mlp"}},
    }
    ids = {}
    with session_scope() as session:
        for name, body in bodies.items():
            job = crud.create_job(session, JobSpec.model_validate(as_stored_before(body)), "gpus-0")
            job.spec = as_stored_before(body)
            ids[name] = job.id
        base = as_stored_before(bodies["mlp"])
        models = {"type": "categorical", "choices": [{"batch_norm": True}, GRAPH]}
        sweep_spec = {"base": base, "parameters": {"model": models}}
        sweep = create_sweep(session, "s", copy.deepcopy(sweep_spec), None)
        ids["sweep"] = sweep.id
    migrate(BEFORE, up=False)
    migrate("head", up=True)
    with session_scope() as session:
        specs = {name: stored(session, Job, ids[name]) for name in bodies}
        swept = stored(session, Sweep, ids["sweep"])
    assert momenta(specs["graph"]) == [0.99, 0.99]
    assert specs["graph"]["optimizer"]["momentum"] == 0.5
    assert momenta(specs["mlp-bn"]) == [0.99]
    assert specs["mlp-bn"]["model"]["batch_norm_momentum"] == 0.99
    assert "batch_norm_momentum" not in specs["mlp"]["model"]  # no batch norm: nothing to keep
    assert swept["base"]["model"]["batch_norm_momentum"] == 0.99  # a trial may add one
    mlp_choice, graph_choice = swept["parameters"]["model"]["choices"]  # whole models
    assert mlp_choice == {"batch_norm": True, "batch_norm_momentum": 0.99}
    assert [node.get("momentum") for node in graph_choice["layers"]] == [None, 0.99, 0.99]
    assert momenta(GRAPH_JOB) == [0.9, 0.9]  # a spec submitted now: the new default

    migrate(BEFORE, up=False)  # the previous revision refuses the fields: they go
    with session_scope() as session:
        assert stored(session, Job, ids["graph"]) == as_stored_before(bodies["graph"])
        assert stored(session, Job, ids["mlp-bn"]) == as_stored_before(bodies["mlp-bn"])
        assert stored(session, Sweep, ids["sweep"]) == sweep_spec
    migrate("head", up=True)
