"""Sequence models train the same in both frameworks, on uploaded token ids and float sequences.

One SGD step from the same weights gives the same weights in PyTorch and TensorFlow for an
LSTM and a GRU over image rows and for an embedding over token ids; then jobs on uploads are
submitted over HTTP (checked at submit as any job) and run in-process through the worker's own
attempt code: the loss falls, the exported model.onnx, fed the user's raw rows, scores what the
framework scored, and the job predicts over HTTP (token ids out of range are a 422).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.schemas.job_spec import JobSpec
from tests.conftest import make_key
from tests.worker.training.inprocess import Run, run_spec
from tests.worker.training.test_parity import FRAMEWORKS, ONE_BATCH, one_epoch_in_each
from worker.training.backend import Placement, create_backend
from worker.training.callbacks import TrainState
from worker.training.data import Splits
from worker.training.onnx_export import run_onnx

pytestmark = [pytest.mark.torch, pytest.mark.tf]
ROWS = {"name": "rows", "op": "reshape", "shape": [8, 8]}  # digits: 8 steps of 8 pixels
VOCAB, STEPS, MARKERS = 16, 10, 3


def graph(*layers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "graph", "layers": [*layers]}


@pytest.mark.parametrize(
    "model",
    [
        graph(ROWS, {"name": "rnn", "op": "lstm", "units": 6}),
        graph(ROWS, {"name": "rnn", "op": "gru", "units": 6, "return_sequences": True}),
    ],
    ids=["lstm", "gru-sequences"],
)
def test_one_sgd_step_on_a_recurrent_graph_gives_the_same_weights(model: dict[str, Any]) -> None:
    after = one_epoch_in_each({**ONE_BATCH, "model": model}, rate=0.1)
    for a, b in zip(after["pytorch"], after["tensorflow"], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_one_sgd_step_over_token_ids_gives_the_same_weights() -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(0, VOCAB, (48, STEPS)).astype(np.int32)
    splits = Splits(x, (x == 3).any(axis=1).astype(np.int64), None, None, None, None, 2)
    splits.vocab = VOCAB
    model = graph(
        {"name": "emb", "op": "embedding", "vocab_size": VOCAB, "dim": 4},
        {"name": "rnn", "op": "lstm", "units": 5},
    )
    after = {}
    for framework in FRAMEWORKS:
        fields = {**ONE_BATCH, "framework": framework, "dataset": {"id": "tokens"}}
        spec = JobSpec.model_validate({**fields, "model": model})
        backend = create_backend(spec, splits, Placement())
        try:
            start = np.random.default_rng(3)
            backend.set_weights([start.normal(0, 0.2, w.shape) for w in backend.get_weights()])
            assert backend.train_epoch(TrainState(epochs=1, learning_rate=0.1)) is not None
            after[framework] = backend.get_weights()
        finally:
            backend.close()
    for a, b in zip(after["pytorch"], after["tensorflow"], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def token_data(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Filler ids MARKERS … VOCAB-1, and one marker id at a random step: the class."""
    rng = np.random.default_rng(seed)
    x = rng.integers(MARKERS, VOCAB, (samples, STEPS))
    y = np.arange(samples) % MARKERS
    x[np.arange(samples), rng.integers(0, STEPS, samples)] = y
    return x, y


def float_sequences(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(samples, 8 steps, 3 features); the class: whether feature 0 sums above 0."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, 8, 3))
    return x, (x[:, :, 0].sum(axis=1) > 0).astype(np.int64)


DATA = {
    "tokens": (token_data, {"kind": "tokens"}),
    "float_sequences": (float_sequences, {}),
}
MODELS = {
    "tokens": graph(
        {"name": "emb", "op": "embedding", "vocab_size": VOCAB, "dim": 8},
        {"name": "rnn", "op": "lstm", "units": 16},
    ),
    "float_sequences": graph({"name": "rnn", "op": "gru", "units": 16}),
}


@pytest.fixture
def client(sqlite_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('sequences')}"
        yield client


def upload_and_submit(client: TestClient, data: str, framework: str) -> tuple[str, Any]:
    """Upload DATA[data] (its test split returned) and submit a MODELS[data] job on it."""
    make, form = DATA[data]
    (x, y), test = make(320, seed=1), make(64, seed=2)
    buf = io.BytesIO()
    np.savez(buf, x=x, y=y, x_test=test[0], y_test=test[1])
    uploaded = client.post("/v1/datasets", files={"file": ("d.npz", buf.getvalue())}, data=form)
    assert uploaded.status_code == 201, uploaded.text
    body = {
        "framework": framework,
        "dataset": {"id": uploaded.json()["id"], "normalize": "none"},
        "model": MODELS[data],
        "training": {"epochs": 2, "batch_size": 32},
        "optimizer": {"name": "adam", "learning_rate": 0.01},
    }
    job = client.post("/v1/jobs", json=body)
    assert job.status_code == 201, job.text
    return job.json()["id"], test


def run_as_a_worker(job_id: str) -> tuple[Run, Path]:
    """The job claimed, its attempt run in-process where a worker writes it, then finished."""
    with session_scope() as session:
        job = crud.claim_job(session, job_id, "w1", 30)
        assert job is not None
        spec = JobSpec.model_validate(job.spec)
    workdir = JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root
    run = run_spec(spec, workdir, data_dir=get_settings().resolved_data_dir)
    with session_scope() as session:
        outcome = run.outcome
        crud.finish_job(
            session,
            job_id,
            1,
            outcome.status,
            stop_reason=outcome.stop_reason,
            reason="in-process attempt",
            result=outcome.result,
        )
    return run, workdir


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("data", sorted(DATA))
def test_a_sequence_job_on_an_upload_trains_exports_and_predicts(
    client: TestClient, data: str, framework: str
) -> None:
    job_id, (x_test, y_test) = upload_and_submit(client, data, framework)
    run, workdir = run_as_a_worker(job_id)
    assert run.outcome.status == "succeeded", run.outcome.error
    assert run.rows[1]["train_loss"] < run.rows[0]["train_loss"], run.rows
    result = run.outcome.result
    assert result["export"]["onnx"]["max_abs_diff"] <= 1e-4
    # model.onnx takes the user's raw rows (token ids as float32) and scores what training did
    logits = run_onnx(JobFiles(workdir).onnx.read_bytes(), x_test.astype(np.float32))
    accuracy = float(np.mean(logits.argmax(axis=1) == y_test))
    assert accuracy == pytest.approx(result["test_accuracy"], abs=1.5 / len(y_test))
    answer = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": x_test[:5].tolist()})
    assert answer.status_code == 200, answer.text
    assert answer.json()["predictions"] == logits[:5].argmax(axis=1).tolist()
    if data == "tokens":  # ids the embedding has no row for are refused, not wrapped around
        for bad in (VOCAB, -1, 2.5):
            rows = np.where(np.arange(STEPS) == 0, bad, x_test[0]).tolist()
            refused = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": [rows]})
            assert refused.status_code == 422, refused.text
            assert f"token ids: whole numbers 0 … {VOCAB - 1}" in refused.json()["detail"]
