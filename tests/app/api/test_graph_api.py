"""The model graph through the service, on SQLite and PostgreSQL: the job resource's
model_summary (the 201, GET, the list, uploads), admission's cost agreeing with it, and every
graph 422 naming its node over HTTP."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.db import session_scope
from app.domain.admission import data_of
from app.domain.cost import DataShape, estimate, graph_of
from app.domain.keys import Caller
from app.domain.tables import Job
from app.schemas.job_spec import JobSpec
from tests.conftest import make_key

BASE: dict[str, Any] = {"framework": "pytorch", "dataset": {"name": "fashion_mnist"}}
RESIDUAL = [
    {"name": "stem", "op": "conv2d", "filters": 4, "kernel_size": 3},
    {"name": "bn0", "op": "batch_norm"},
    {"name": "a0", "op": "activation", "fn": "relu"},
    {"name": "c1", "op": "conv2d", "filters": 4},
    {"name": "sum", "op": "add", "inputs": ["c1", "a0"]},
    {"name": "pool", "op": "max_pool2d", "size": 2},
    {"name": "gap", "op": "global_avg_pool"},
]
# By hand, for (28, 28, 1) images and 10 classes: conv 3*3*1*4 + 4, batch norm's scale and
# offset (its moving statistics are not parameters), conv 3*3*4*4 + 4, the head 4*10 + 10.
RESIDUAL_LAYERS = [
    ("stem", "conv2d", [28, 28, 4], 40),
    ("bn0", "batch_norm", [28, 28, 4], 8),
    ("a0", "activation", [28, 28, 4], 0),
    ("c1", "conv2d", [28, 28, 4], 148),
    ("sum", "add", [28, 28, 4], 0),
    ("pool", "max_pool2d", [14, 14, 4], 0),
    ("gap", "global_avg_pool", [4], 0),
    ("head", "dense", [10], 50),
]


@pytest.fixture
def client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('grapher')}"
        yield test_client


def graph(layers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {**BASE, "model": {"type": "graph", "layers": layers}, **spec}


def layers_of(summary: dict[str, Any]) -> list[tuple[str, str, list[int], int]]:
    return [(x["name"], x["op"], x["output_shape"], x["parameters"]) for x in summary["layers"]]


def test_the_job_resource_carries_its_built_models_summary(client: TestClient) -> None:
    created = client.post("/v1/jobs", json=graph(RESIDUAL))
    assert created.status_code == 201, created.text
    job = created.json()
    summary = job["model_summary"]
    assert layers_of(summary) == RESIDUAL_LAYERS
    assert summary["parameters"] == sum(p for *_, p in RESIDUAL_LAYERS) == 246
    spec = JobSpec.model_validate(job["spec"])
    assert summary["flops_per_sample"] == graph_of(spec, data_of_spec(spec)).flops_per_sample > 0
    assert client.get(f"/v1/jobs/{job['id']}").json()["model_summary"] == summary
    mlp = client.post("/v1/jobs", json={**BASE, "dataset": {"name": "digits"}}).json()
    assert layers_of(mlp["model_summary"]) == [  # the template's graph: flattened 8x8x1 digits
        ("flatten", "flatten", [64], 0),
        ("dense0", "dense", [128], 64 * 128 + 128),
        ("act0", "activation", [128], 0),
        ("head", "dense", [10], 128 * 10 + 10),
    ]
    listed = {j["id"]: j["model_summary"] for j in client.get("/v1/jobs").json()["items"]}
    assert listed == {job["id"]: summary, mlp["id"]: mlp["model_summary"]}
    with session_scope() as session:  # a job stored before summaries existed reads as null
        session.execute(update(Job).where(Job.id == mlp["id"]).values(model_summary=None))
    assert client.get(f"/v1/jobs/{mlp['id']}").json()["model_summary"] is None
    assert client.get("/v1/jobs?limit=1&status=queued").json()["items"][0]["model_summary"] is None


def data_of_spec(spec: JobSpec) -> DataShape | None:
    with session_scope() as session:
        return data_of(session, spec, Caller("nobody", False))


MODELS = [
    {"type": "graph", "layers": RESIDUAL},
    {"type": "cnn", "conv_channels": [8], "dense_units": [16]},
    {"type": "mlp", "hidden_units": [32, 16], "batch_norm": True},
]


def test_admissions_memory_estimate_counts_the_summarys_parameters(client: TestClient) -> None:
    for model in MODELS:
        job = client.post("/v1/jobs", json={**BASE, "model": model}).json()
        spec = JobSpec.model_validate(job["spec"])
        data = data_of_spec(spec)
        assert data is not None and spec.optimizer.name == "adam"
        cost = estimate(spec, data)
        parameters = job["model_summary"]["parameters"]
        assert cost.parameters == parameters, model
        # weights and gradients, and Adam's two moments, each float32 per parameter
        assert cost.model_bytes == (2 + 2) * parameters * 4, model


def test_a_job_on_an_upload_is_summarized_for_its_sample_shape(client: TestClient) -> None:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    np.savez(buf, x=rng.integers(0, 256, (30, 6, 5), dtype=np.uint8), y=np.arange(30) % 3)
    upload = client.post("/v1/datasets", files={"file": ("d.npz", buf.getvalue())})
    assert upload.status_code == 201, upload.text
    dataset = {"id": upload.json()["id"]}
    layers = [
        {"name": "conv", "op": "conv1d", "filters": 3, "kernel_size": 3},
        {"name": "gap", "op": "global_avg_pool"},
    ]
    job = client.post("/v1/jobs", json=graph(layers, dataset=dataset))
    assert job.status_code == 201, job.text
    assert layers_of(job.json()["model_summary"]) == [  # (6, 5): six steps of five features
        ("conv", "conv1d", [6, 3], 3 * 5 * 3 + 3),
        ("gap", "global_avg_pool", [3], 0),
        ("head", "dense", [3], 3 * 3 + 3),
    ]
    pooled = graph([{"name": "p", "op": "max_pool2d"}], dataset=dataset)
    refused = client.post("/v1/jobs", json=pooled)
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "dataset.id"
    assert "max_pool2d 'p'" in refused.json()["detail"] and "(6, 5)" in refused.json()["detail"]


def conv(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "op": "conv2d", "filters": 4, **fields}


def dense(name: str, units: int) -> dict[str, Any]:
    return {"name": name, "op": "dense", "units": units}


ROWS = {"name": "rows", "op": "reshape", "shape": [28, 28]}
FLAT = {"name": "f", "op": "flatten"}
TOO_LARGE = 784 * 8192 + 8192 + 8192 * 8192 + 8192 + 8192 * 10 + 10
# (what, layers, the field the 422 names, words its message must hold)
BAD_GRAPHS: list[tuple[str, list[dict[str, Any]], str, list[str]]] = [
    (
        "a 2-D pool on a sequence",
        [ROWS, {"name": "p", "op": "max_pool2d"}],
        "model",
        ["max_pool2d 'p'", "an image (H, W, C)", "(28, 28)"],
    ),
    (
        "add of unequal shapes",
        [conv("c"), {"name": "s", "op": "add", "inputs": ["c", "input"]}],
        "model",
        ["add 's'", "(28, 28, 4)", "(28, 28, 1)"],
    ),
    (
        "an input that does not exist",
        [conv("c"), {"name": "s", "op": "add", "inputs": ["c", "nope"]}],
        "model.graph",
        ["add 's'", "'nope' does not exist"],
    ),
    (
        "an input that comes later",
        [conv("c", inputs=["f"]), FLAT],
        "model.graph",
        ["conv2d 'c'", "'f' comes later"],
    ),
    (
        "two nodes with one name",
        [conv("c"), conv("c")],
        "model.graph",
        ["two layers are called 'c'"],
    ),
    (
        "a reserved name",
        [{**FLAT, "name": "head"}],
        "model.graph",
        ["flatten 'head' (layer 0)", "reserved"],
    ),
    (
        "add with one input (the default wiring)",
        [conv("c"), {"name": "s", "op": "add"}],
        "model.graph",
        ["add 's'", "takes 2 to 8 inputs"],
    ),
    (
        "concat with one input named",
        [conv("c"), {"name": "j", "op": "concat", "inputs": ["c"]}],
        "model.graph.layers.1.concat.inputs",
        ["layer 1 'j' (concat)", "at least 2"],
    ),
    (
        "257 nodes",
        [{"name": f"a{i}", "op": "activation", "fn": "relu"} for i in range(257)],
        "model.graph.layers",
        ["at most 256 layers", "257"],
    ),
    (
        "an unknown op",
        [conv("c"), {"name": "x", "op": "convolution"}],
        "model.graph.layers.1",
        ["layer 1 'x'", "unknown op 'convolution'", "conv2d"],
    ),
    (
        "a field out of bounds",
        [conv("c1", filters=5000)],
        "model.graph.layers.0.conv2d.filters",
        ["layer 0 'c1' (conv2d)", "1024"],
    ),
    (
        "a field the op does not have",
        [FLAT, {"name": "d", "op": "dense", "units": 8, "filters": 3}],
        "model.graph.layers.1.dense.filters",
        ["layer 1 'd' (dense)", "Extra inputs"],
    ),
    (
        "a reshape whose sizes differ",
        [{"name": "r", "op": "reshape", "shape": [28, 27]}],
        "model",
        ["reshape 'r'", "(28, 27)", "756", "(28, 28, 1)", "784"],
    ),
    (
        "too many parameters",
        [FLAT, dense("d1", 8192), dense("d2", 8192)],
        "model",
        [f"{TOO_LARGE:,} parameters", "the limit is 50,000,000", "dense 'd2'"],
    ),
]


def test_every_graph_422_names_the_node(client: TestClient) -> None:
    for what, layers, field, words in BAD_GRAPHS:
        response = client.post("/v1/jobs", json=graph(layers))
        assert response.status_code == 422, (what, response.status_code, response.text[:300])
        assert response.headers["content-type"].startswith("application/problem+json"), what
        problem = response.json()
        assert problem["errors"][0]["field"] == field, (what, problem["errors"])
        for word in words:
            assert word in problem["errors"][0]["msg"] and word in problem["detail"], (what, word)
        assert "Traceback" not in response.text and "/app/" not in response.text, what
    assert client.get("/v1/jobs").json()["items"] == []  # none of them was stored


def test_an_op_naming_an_unknown_initializer_is_a_422_at_submit(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An op whose variable names an initializer no back-end draws (a typo mypy would flag,
    here made at run time) is refused at submit, naming the node, the variable and the name,
    rather than failing in the training process."""
    from app.schemas.graph.base import Variable
    from app.schemas.graph.ops.dense import Dense

    def misnamed(self: Dense, xs: list[Any]) -> list[Variable]:
        shape = (xs[0].shape[-1], self.units)
        return [
            Variable("kernel", shape, "glorot_unifrom"),
            Variable("bias", (self.units,), "zeros"),
        ]  # type: ignore[arg-type]

    monkeypatch.setattr(Dense, "variables", misnamed)
    response = client.post("/v1/jobs", json=graph([FLAT, dense("d1", 8)]))
    assert response.status_code == 422, response.text[:300]
    error = response.json()["errors"][0]
    assert error["field"] == "model", error
    for word in ("dense 'd1'", "variable 'kernel'", "'glorot_unifrom'", "glorot_uniform"):
        assert word in error["msg"], (word, error["msg"])
    assert client.get("/v1/jobs").json()["items"] == []
