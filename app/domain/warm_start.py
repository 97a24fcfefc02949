"""Warm start at submit: which nodes of a succeeded job's graph the new job takes.

Both graphs are built for their own data, without a framework (as the model summary is), and
compared node by node: a node is taken when it has the same name, op and variable shapes in
both; the head only when the classes are the same too. The stored spec lists the nodes taken,
so the worker loads exactly those and the job resource shows where its weights came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.domain.admission import data_of
from app.domain.cost import graph_of
from app.domain.keys import Caller, caller_of
from app.domain.states import JobStatus
from app.domain.tables import Job
from app.schemas.continuation import ContinueRequest
from app.schemas.dataset_spec import class_labels
from app.schemas.graph import BuiltGraph, BuiltNode, GraphError
from app.schemas.graph.model import HEAD
from app.schemas.job_spec import JobSpec

LOC = ("body", "init")


class InitProblem(Exception):
    """The init cannot be used: `status` 404 (no such job for this key) or 422 (`errors`, in
    RequestValidationError's shape)."""

    def __init__(self, status: int, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors[0]["msg"])
        self.status, self.errors = status, errors


def _error(loc: tuple[Any, ...], msg: str) -> dict[str, Any]:
    return {"loc": LOC + loc, "msg": msg, "type": "value_error"}


@dataclass(frozen=True)
class Built:
    """A job's graph and what its head maps to (task, outputs, class labels)."""

    graph: BuiltGraph
    head: tuple[Any, ...]

    def node(self, name: str) -> BuiltNode | None:
        return next((n for n in self.graph.nodes if n.name == name), None)


def resolve_init(session: Session, key: Caller, spec: JobSpec) -> JobSpec:
    """The spec with init.nodes as the names taken; InitProblem when the source job is not
    the key's (404), not succeeded, lacks the weights asked for, or a node does not fit (422)."""
    init = spec.init
    if init is None:
        return spec
    source = session.get(Job, init.from_job)
    if source is None or not (key.is_admin or source.owner_id == key.id):
        raise InitProblem(404, [_error(("from_job",), f"no job {init.from_job}")])
    _check_source(source, init.checkpoint)
    mine = _built(session, spec, key, "this job")
    owner = caller_of(session, source.owner_id) if source.owner_id else None
    theirs = _built(session, _spec_of(source), owner, f"job {source.id}")
    named = init.named()
    if named is None:
        taken = [
            n.name for n in mine.graph.nodes if n.variables() and _misfit(n, mine, theirs) is None
        ]
        if not taken:
            msg = f"no node of job {source.id} has the name, op and variable shapes of one here"
            raise InitProblem(422, [_error(("nodes",), msg)])
    else:
        errors = [
            _error(("nodes", i), f"{name!r}: {why}")
            for i, name in enumerate(named)
            if (why := _named_misfit(name, mine, theirs, source.id)) is not None
        ]
        if errors:
            raise InitProblem(422, errors)
        taken = named
    return spec.model_copy(update={"init": init.model_copy(update={"nodes": taken})})


def _check_source(source: Job, checkpoint: str) -> None:
    """422 unless the job succeeded and kept the weights of the epoch asked for."""
    if source.status != JobStatus.succeeded:
        msg = f"job {source.id} is {source.status}; only a succeeded job's weights can start one"
        raise InitProblem(422, [_error(("from_job",), msg)])
    result = source.result or {}
    best, last = result.get("best_epoch"), result.get("stopped_epoch")
    restored = bool(result.get("restored_best_weights"))
    if best == last or (checkpoint == "best") == restored:
        return
    kept = f"its best epoch's ({best})" if restored else f"its last epoch's ({last})"
    use = "best" if restored else "last"
    msg = f"job {source.id} kept only {kept} weights; ask for checkpoint {use}"
    raise InitProblem(422, [_error(("checkpoint",), msg)])


def _spec_of(source: Job) -> JobSpec:
    try:
        return JobSpec.model_validate(source.spec)
    except ValidationError:  # a spec stored by an older version that no longer validates
        msg = f"job {source.id}'s spec can no longer be read; it cannot start another job"
        raise InitProblem(422, [_error(("from_job",), msg)]) from None


def _built(
    session: Session, spec: JobSpec, key: Caller | None, who: str, loc: tuple[str, ...] = LOC
) -> Built:
    data = data_of(session, spec, key)
    graph = None
    if data is not None:
        try:
            graph = graph_of(spec, data)
        except GraphError:
            graph = None
    if data is None or graph is None:
        msg = f"{who}'s model cannot be built for its data (is its data set gone?)"
        where = ("from_job",) if loc == LOC else ()
        raise InitProblem(422, [{"loc": loc + where, "msg": msg, "type": "value_error"}])
    labels = class_labels(spec, data.outputs) if spec.task == "classification" else []
    return Built(graph, (spec.task, data.outputs, tuple(labels)))


def _shapes(node: BuiltNode) -> list[tuple[int, ...]]:
    return [v.shape for v in node.variables()]


def _misfit(node: BuiltNode, mine: Built, theirs: Built) -> str | None:
    """Why `node` of this graph cannot take its namesake's weights; None when it can."""
    other = theirs.node(node.name)
    if other is None:
        return "not a node of the source job's graph"
    if other.op.op != node.op.op:
        return f"a {node.op.op} here, a {other.op.op} in the source job"
    if _shapes(other) != _shapes(node):
        return f"variable shapes {_shapes(node)} here, {_shapes(other)} in the source job"
    if node.name == HEAD and mine.head != theirs.head:
        return (
            f"the head maps to {mine.head[1]} outputs {list(mine.head[2])} here and "
            f"{theirs.head[1]} {list(theirs.head[2])} in the source job"
        )
    return None


def _named_misfit(name: str, mine: Built, theirs: Built, source_id: str) -> str | None:
    node = mine.node(name)
    if node is None:
        return "not a node of this job's graph"
    why = _misfit(node, mine, theirs)
    if why is None:
        return None
    fresh = "; leave it out to start it fresh" if name == HEAD else ""
    return why.replace("the source job", f"job {source_id}") + fresh


def continued_body(source: Job, request: ContinueRequest) -> dict[str, Any]:
    """The spec of a job that trains `request.epochs` more from `source`'s last checkpoint:
    the same spec, its epochs counted on from the source's last one, with the request's
    changes (init: the checkpoint holds all). InitProblem for a patience without early stopping."""
    body = dict(source.spec) | request.changes()
    done = (source.result or {}).get("stopped_epoch") or body["training"]["epochs"]
    body["training"] = {**body["training"], "epochs": int(done) + request.epochs}
    body["init"], body["continues"] = None, source.id
    if request.early_stopping is not None:
        if body.get("early_stopping") is None:
            msg = f"job {source.id} has no early stopping: its checkpoint holds no wait to go on"
            loc = ("body", "early_stopping")
            raise InitProblem(422, [{"loc": loc, "msg": msg, "type": "value_error"}])
        patience = request.early_stopping.patience
        body["early_stopping"] = {**body["early_stopping"], "patience": patience}
    return body


def check_continues(session: Session, key: Caller, spec: JobSpec) -> None:
    """InitProblem unless `continues` names a succeeded job of the key with the same
    framework and model, and this one has epochs left after its last."""
    if spec.continues is None:
        return
    loc = ("continues",)
    if spec.init is not None:  # the checkpoint holds every weight: init would do nothing
        msg = "init and continues exclude each other: a continued job starts from its checkpoint"
        raise InitProblem(422, [{"loc": ("body", "init"), "msg": msg, "type": "value_error"}])
    source = session.get(Job, spec.continues)
    if source is None or not (key.is_admin or source.owner_id == key.id):
        raise InitProblem(404, [{"loc": ("body", *loc), "msg": f"no job {spec.continues}"}])
    done = int((source.result or {}).get("stopped_epoch") or 0)
    model = spec.model.model_dump(mode="json")
    why = None
    if source.status != JobStatus.succeeded:
        why = f"job {source.id} is {source.status}; only a succeeded job can be continued"
    elif (source.framework, _spec_of(source).model.model_dump(mode="json")) != (
        spec.framework,
        model,
    ):
        why = f"job {source.id} has another framework or model; its checkpoint would not load"
    elif spec.training.epochs <= done:
        why = f"job {source.id} trained {done} epochs already; training.epochs counts them"
    if why is not None:
        raise InitProblem(422, [{"loc": ("body", *loc), "msg": why, "type": "value_error"}])
    if spec.dataset != _spec_of(source).dataset:
        _check_same_shapes(session, key, spec, source)


def _check_same_shapes(session: Session, key: Caller, spec: JobSpec, source: Job) -> None:
    """A continued job on other data: InitProblem unless each node with variables (the head
    too, with its classes) is as in the source job, so that its checkpoint loads."""
    loc = ("body", "dataset")
    mine = _built(session, spec, key, "this job", loc)
    owner = caller_of(session, source.owner_id) if source.owner_id else None
    theirs = _built(session, _spec_of(source), owner, f"job {source.id}", loc)
    whys = [
        f"{node.name!r}: {why}".replace("the source job", f"job {source.id}")
        for node in mine.graph.nodes
        if node.variables() and (why := _misfit(node, mine, theirs)) is not None
    ]
    if whys:
        raise InitProblem(422, [{"loc": loc, "msg": m, "type": "value_error"} for m in whys])
