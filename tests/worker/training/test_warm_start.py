"""Freezing and warm start in real training, in both frameworks: a frozen node's variables
(batch norm's moving statistics too) are bit-identical after training while the others move;
a job started from another's weights, in the same framework or the other one, holds them
exactly (the same predictions before training) and learns from there."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from app.domain.job_files import CARD_FILE, ONNX_FILE, JobFiles
from tests.worker.training.inprocess import EMPTY_DATA_DIR, backend_for, make_spec, run_spec
from worker.training.data import load_splits
from worker.training.init import initial_weights
from worker.training.warm_start import graph_for, keys, load_init

pytestmark = [pytest.mark.torch, pytest.mark.tf]
FRAMEWORKS = ["pytorch", "tensorflow"]
LAYERS: list[dict[str, Any]] = [
    {"name": "flat", "op": "flatten"},
    {"name": "d1", "op": "dense", "units": 16},
    {"name": "bn", "op": "batch_norm"},
    {"name": "act", "op": "activation", "fn": "relu"},
    {"name": "d2", "op": "dense", "units": 16},
]
TAKEN = ["d1", "bn", "d2", "head"]  # every node with variables, as "matching" resolves


def fields(layers: list[dict[str, Any]], epochs: int = 1, **more: Any) -> dict[str, Any]:
    return {
        "model": {"type": "graph", "layers": layers},
        "training": {"epochs": epochs, "batch_size": 32},
        "dataset": {"name": "digits", "limit": 600},
        **more,
    }


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_frozen_node_keeps_its_variables_bit_for_bit(framework: str, tmp_path: Path) -> None:
    frozen = {"d1", "bn"}
    layers = [{**x, "trainable": False} if x["name"] in frozen else x for x in LAYERS]
    # decoupled decay and an L2 term: neither may touch a frozen kernel
    optimizer = {"name": "adamw", "learning_rate": 0.01, "weight_decay": 0.1}
    spec = make_spec(framework, **fields(layers, optimizer=optimizer, regularization={"l2": 1e-3}))
    graph = graph_for(spec, load_splits(spec, EMPTY_DATA_DIR))
    before = initial_weights(graph.variables(), spec.training.seed)
    run = run_spec(spec, tmp_path)
    assert run.outcome.status == "succeeded", run.outcome
    for (node, variable), a, b in zip(keys(graph), before, run.weights, strict=True):
        if node in frozen:  # moving statistics too: batch norm ran as at inference
            assert np.array_equal(a, b), f"{node}/{variable} moved"
        elif variable not in ("bias", "beta"):
            assert not np.array_equal(a, b), f"{node}/{variable} did not train"
    assert run.outcome.result is not None
    assert run.outcome.result["parameters"] == graph.parameters == 16 * 16 + 16 + 16 * 10 + 10
    assert graph.frozen_parameters == 64 * 16 + 16 + 2 * 16


def onnx_props(workdir: Path) -> dict[str, str]:
    """The epochal.* metadata of the job's exported model.onnx, read back with onnx."""
    model = onnx.load(str(JobFiles(workdir).model_dir / ONNX_FILE))
    return {p.key: p.value for p in model.metadata_props if p.key.startswith("epochal.")}


def trained_source(framework: str, jobs: Path) -> tuple[str, list[np.ndarray]]:
    """A succeeded job's id (its directory under `jobs`) and final weights."""
    job_id = str(uuid.uuid4())
    run = run_spec(make_spec(framework, **fields(LAYERS, epochs=4)), jobs / job_id)
    assert run.outcome.status == "succeeded", run.outcome
    return job_id, run.weights


@pytest.mark.parametrize(
    ("source", "target"), [("pytorch", "tensorflow"), ("tensorflow", "pytorch")]
)
def test_a_job_starts_from_the_other_frameworks_weights(
    source: str, target: str, tmp_path: Path
) -> None:
    job_id, weights = trained_source(source, tmp_path)
    init = {"from_job": job_id, "nodes": TAKEN}
    spec = make_spec(target, **fields(LAYERS, init=init, training={"seed": 9, "epochs": 1}))
    splits = load_splits(spec, EMPTY_DATA_DIR)
    with backend_for(make_spec(source, **fields(LAYERS))) as original:
        original.set_weights(weights)
        expected = original.predict(splits.x_val)
    with backend_for(spec) as backend:
        fresh = backend.predict(splits.x_val)
        assert load_init(spec, backend, splits, tmp_path / str(uuid.uuid4())) is None
        for got, want in zip(backend.get_weights(), weights, strict=True):
            assert np.array_equal(got, want)
        got = backend.predict(splits.x_val)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert np.max(np.abs(fresh - expected)) > 0.1  # its own seed would have started elsewhere


def test_a_warm_started_job_begins_where_its_source_ended(tmp_path: Path) -> None:
    job_id, weights = trained_source("pytorch", tmp_path)
    init = {"from_job": job_id, "nodes": ["d1", "bn", "d2"], "checkpoint": "last"}
    warm = make_spec("pytorch", **fields(LAYERS, init=init))
    scratch = run_spec(make_spec("pytorch", **fields(LAYERS)), tmp_path / str(uuid.uuid4()))
    workdir = tmp_path / str(uuid.uuid4())
    started = run_spec(warm, workdir)
    assert started.outcome.status == "succeeded", started.outcome
    first, fresh = started.rows[0], scratch.rows[0]
    assert first["val_accuracy"] > fresh["val_accuracy"] + 0.2, (first, fresh)
    lineage = {"from_job": job_id, "nodes": ["d1", "bn", "d2"], "checkpoint": "last"}
    assert started.outcome.result is not None and started.outcome.result["lineage"] == lineage
    card = json.loads((JobFiles(workdir).model_dir / CARD_FILE).read_text())
    assert card["lineage"] == lineage
    assert onnx_props(workdir) == {
        "epochal.init_from_job": job_id,
        "epochal.init_nodes": "d1,bn,d2",
        "epochal.init_checkpoint": "last",
    }
    assert onnx_props(tmp_path / job_id) == {}  # a job started fresh names no parent
    gone = make_spec("pytorch", **fields(LAYERS, init={**init, "from_job": "gone"}))
    failed = run_spec(gone, tmp_path / str(uuid.uuid4()))
    assert failed.outcome.status == "failed" and "job gone's weights" in str(failed.outcome.error)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_continued_job_goes_on_exactly_as_one_longer_job(framework: str, tmp_path: Path) -> None:
    layers = [*LAYERS[:4], {"name": "drop", "op": "dropout", "rate": 0.2}, LAYERS[4]]
    optimizer = {"name": "adam", "learning_rate": 0.01}
    schedule = {"name": "step", "step_size": 1, "gamma": 0.7}
    body = fields(layers, epochs=4, optimizer=optimizer, lr_scheduler=schedule)
    whole = run_spec(make_spec(framework, **body), tmp_path / str(uuid.uuid4()))
    first_id = str(uuid.uuid4())
    first = run_spec(
        make_spec(framework, **(body | {"training": {"epochs": 2}})), tmp_path / first_id
    )
    then = make_spec(framework, **(body | {"continues": first_id}))
    workdir = tmp_path / str(uuid.uuid4())
    rest = run_spec(then, workdir)
    assert rest.outcome.status == "succeeded", rest.outcome
    assert [row["epoch"] for row in rest.rows] == [3, 4]
    keys_ = ["train_loss", "train_accuracy", "val_loss", "val_accuracy", "learning_rate"]
    for a, b in zip(first.rows + rest.rows, whole.rows, strict=True):
        assert [a[k] for k in keys_] == pytest.approx([b[k] for k in keys_], rel=1e-6)
    for a, b in zip(rest.weights, whole.weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert rest.outcome.result is not None
    assert rest.outcome.result["lineage"] == {"continues": first_id}
    assert onnx_props(workdir) == {"epochal.continues": first_id}
    assert run_spec(
        make_spec(framework, **(body | {"continues": "gone"})), tmp_path / "x"
    ).outcome.error == ("continues: job gone's last checkpoint is not on this worker")
