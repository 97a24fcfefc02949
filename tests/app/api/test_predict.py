"""POST /v1/jobs/{id}/predict, in-process against the real database (SQLite and PostgreSQL),
with ONNX models written where the worker's exporter puts them (tests/onnx_models.py).

Predictions of a really trained job are checked in tests/e2e/test_predict_e2e.py.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus
from app.services.predictions import SessionCache
from tests.conftest import make_key
from tests.onnx_models import TinyModel, write_model

BODY = {"framework": "pytorch", "dataset": {"name": "digits"}, "name": "predictor"}
NPY = {"content-type": "application/x-npy"}


def job_dir(job_id: str) -> Path:
    """Where the worker puts the job's files."""
    return JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root


@pytest.fixture
def client(
    db_env: dict[str, str], api_key: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    monkeypatch.setenv("EPOCHAL_MAX_PREDICT_ROWS", "300")
    monkeypatch.setenv("EPOCHAL_PREDICT_CACHE_SESSIONS", "2")
    get_settings.cache_clear()
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {api_key}"
        yield test_client


def new_job(client: TestClient, status: JobStatus = JobStatus.succeeded) -> str:
    """A job moved through the real state machine to `status`."""
    job_id: str = client.post("/v1/jobs", json=BODY).json()["id"]
    if status == JobStatus.queued:
        return job_id
    with session_scope() as session:
        crud.claim_job(session, job_id, "w1", 30)
        if status != JobStatus.running:
            crud.finish_job(session, job_id, 1, status, stop_reason="completed", reason="test")
    return job_id


def trained(client: TestClient, **kwargs: object) -> tuple[str, TinyModel]:
    job_id = new_job(client)
    return job_id, write_model(job_dir(job_id), **kwargs)  # type: ignore[arg-type]


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def npy_header(shape: tuple[int, ...]) -> bytes:
    """Only the header of a float64 .npy array of `shape`."""
    buffer = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()  # magic and version included


def digits(rows: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 17, (rows, 64)).astype(np.float64)


def test_json_rows_get_classes_and_softmax_probabilities(client: TestClient) -> None:
    job_id, model = trained(client)
    rows = digits(5)
    response = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": rows.tolist()})
    assert response.status_code == 200, response.text
    body = response.json()
    logits = model.reference(rows)
    assert body["predictions"] == logits.argmax(axis=1).tolist()
    probabilities = np.array(body["probabilities"])
    assert probabilities.shape == (5, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)
    expected = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(probabilities, expected / expected.sum(1, keepdims=True), atol=1e-5)


def test_an_npy_body_gives_the_same_answer_as_json(client: TestClient) -> None:
    job_id, _ = trained(client)
    rows = digits(7).astype(np.uint8)  # raw pixels as the user has them
    by_json = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": rows.tolist()}).json()
    for media in ("application/x-npy", "application/octet-stream"):
        by_npy = client.post(
            f"/v1/jobs/{job_id}/predict", content=npy(rows), headers={"content-type": media}
        )
        assert by_npy.status_code == 200, by_npy.text
        assert by_npy.json()["predictions"] == by_json["predictions"]
        np.testing.assert_allclose(by_npy.json()["probabilities"], by_json["probabilities"])


def test_named_classes_and_image_rows(client: TestClient) -> None:
    names = ["cat", "dog", "owl"]
    job_id, model = trained(client, row_shape=(4, 4), outputs=3, classes=names, scale=255.0)
    rows = np.random.default_rng(2).integers(0, 256, (6, 4, 4))
    body = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": rows.tolist()}).json()
    assert body["predictions"] == [names[i] for i in model.reference(rows).argmax(1)]


def test_regression_answers_values_only(client: TestClient) -> None:
    job_id, model = trained(client, row_shape=(8,), outputs=1, task="regression", scale=1.0)
    rows = np.random.default_rng(3).normal(size=(4, 8))
    body = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": rows.tolist()}).json()
    assert set(body) == {"predictions"}
    np.testing.assert_allclose(body["predictions"], model.reference(rows)[:, 0], rtol=1e-4)


def expect_422(response: object, *fragments: str) -> str:
    assert response.status_code == 422, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"].startswith("application/problem+json")  # type: ignore[attr-defined]
    problem = response.json()  # type: ignore[attr-defined]
    assert problem["errors"][0]["field"] == "inputs" and "Traceback" not in problem["detail"]
    for fragment in fragments:
        assert fragment in problem["detail"], problem["detail"]
    return str(problem["detail"])


SHAPE = "shape [N, 64]"


@pytest.mark.parametrize(
    "inputs, fragment",
    [
        ([[1.0] * 63], "inputs have shape [1, 63]"),
        ([1.0] * 64, "inputs have shape [64]"),  # one row, not a list of rows
        ([[1.0] * 64, [1.0] * 63], "not a regular array"),
        ([["1"] * 64], "must be numbers"),
        ([[True] * 64], "must be numbers"),
        ([[None] * 64], "must be numbers"),
        ([], "inputs have 0 rows"),
        ([[0.0] * 64] * 301, "301 rows"),
        ([[1e39] * 64], "finite"),
    ],
)
def test_bad_json_inputs_are_422_naming_the_expected_shape(
    client: TestClient, inputs: object, fragment: str
) -> None:
    job_id, _ = trained(client)
    detail = expect_422(
        client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": inputs}), fragment
    )
    if "finite" not in fragment:
        assert SHAPE in detail and "N <= 300" in detail


def test_nan_and_malformed_bodies_are_422(client: TestClient) -> None:
    job_id, _ = trained(client)
    url = f"/v1/jobs/{job_id}/predict"
    json_type = {"content-type": "application/json"}
    nan = b'{"inputs": [[' + b", ".join([b"NaN"] * 64) + b"]]}"
    expect_422(client.post(url, content=nan, headers=json_type), "finite")
    expect_422(client.post(url, content=b"{", headers=json_type), "not JSON", SHAPE)
    expect_422(client.post(url, json={"rows": [[0] * 64]}), '{"inputs"', SHAPE)
    expect_422(client.post(url, content=b"[" * 100_000, headers=json_type), "not JSON")
    rows = digits(2)
    rows[1, 3] = np.inf
    expect_422(client.post(url, content=npy(rows), headers=NPY), "finite")


def test_bad_npy_bodies_are_422(client: TestClient) -> None:
    job_id, _ = trained(client)
    url = f"/v1/jobs/{job_id}/predict"
    expect_422(client.post(url, content=npy(digits(2)[:, :60]), headers=NPY), "[2, 60]", SHAPE)
    expect_422(client.post(url, content=b"not an array", headers=NPY), "not a .npy array")
    expect_422(client.post(url, content=npy(np.array(["a"] * 64)[None]), headers=NPY), "numbers")
    objects = np.empty((1, 64), dtype=object)
    objects[:] = 1
    pickled = io.BytesIO()
    np.save(pickled, objects, allow_pickle=True)  # the server must refuse it, never unpickle
    expect_422(client.post(url, content=pickled.getvalue(), headers=NPY), "numbers")
    # A header that claims more than the body holds: refused before anything is allocated.
    lie = npy_header((300, 64)) + digits(1).tobytes()
    expect_422(client.post(url, content=lie, headers=NPY), "bytes of data")
    huge = npy_header((999_999_999_999, 64)) + digits(1).tobytes()
    expect_422(client.post(url, content=huge, headers=NPY), "999999999999 rows", SHAPE)


def test_a_job_without_success_or_model_is_409(client: TestClient) -> None:
    rows = {"inputs": digits(1).tolist()}
    for status in (JobStatus.queued, JobStatus.running, JobStatus.failed):
        job_id = new_job(client, status)
        write_model(job_dir(job_id))
        response = client.post(f"/v1/jobs/{job_id}/predict", json=rows)
        assert response.status_code == 409 and f"is {status}" in response.json()["detail"]
    job_id = new_job(client)  # succeeded, but trained before models were exported
    response = client.post(f"/v1/jobs/{job_id}/predict", json=rows)
    assert response.status_code == 409 and "model.onnx" in response.json()["detail"]
    write_model(job_dir(job_id))
    JobFiles(job_dir(job_id)).onnx.write_bytes(b"garbage")
    response = client.post(f"/v1/jobs/{job_id}/predict", json=rows)
    assert response.status_code == 409 and "cannot be loaded" in response.json()["detail"]
    job_id = new_job(client)  # a card that disagrees with its model: refused, never a 500
    card_file = JobFiles(job_dir(job_id)).model_card
    write_model(job_dir(job_id))
    card = json.loads(card_file.read_text())
    card_file.write_text(json.dumps({**card, "input": {"shape": [None, 8]}}))
    response = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": [[0] * 8]})
    assert response.status_code == 409 and "says rows of [8]" in response.json()["detail"]


def test_another_keys_job_is_404(client: TestClient) -> None:
    job_id, _ = trained(client)
    other = {"Authorization": f"Bearer {make_key('other')}"}
    rows = {"inputs": digits(1).tolist()}
    assert client.post(f"/v1/jobs/{job_id}/predict", json=rows, headers=other).status_code == 404
    assert client.post(f"/v1/jobs/{job_id}/predict", json=rows).status_code == 200
    admin = {"Authorization": f"Bearer {make_key('root', admin=True)}"}
    assert client.post(f"/v1/jobs/{job_id}/predict", json=rows, headers=admin).status_code == 200


def test_the_session_cache_is_bounded_and_follows_a_new_export(client: TestClient) -> None:
    jobs = [trained(client, seed=i) for i in range(3)]  # more jobs than the 2 sessions kept
    rows = digits(3)
    state = client.app.state  # type: ignore[attr-defined]
    for _ in range(2):
        for job_id, model in jobs:
            body = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": rows.tolist()})
            assert body.json()["predictions"] == model.reference(rows).argmax(1).tolist()
            assert len(state.predictions) <= 2
    assert state.predictions.loads == 6  # round robin over 3 jobs in 2 slots: every call misses
    job_id, _ = jobs[2]
    client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": rows.tolist()})
    assert state.predictions.loads == 6  # the most recent one is still loaded
    newer = write_model(job_dir(job_id), hidden=(8, 8), seed=9)
    body = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": rows.tolist()}).json()
    assert body["predictions"] == newer.reference(rows).argmax(1).tolist()
    assert state.predictions.loads == 7


def test_the_cache_stays_bounded_and_right_under_threads(tmp_path: Path) -> None:
    models = {f"job{i}": write_model(tmp_path / f"job{i}", seed=i) for i in range(4)}
    cache, rows = SessionCache(capacity=2), digits(2).astype(np.float32)

    def predict(job_id: str) -> list[int]:
        answer = cache.get(job_id, tmp_path / job_id).predict(rows)
        assert len(cache) <= 2
        return list(answer["predictions"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        order = [f"job{i % 4}" for i in range(64)]
        for job_id, predictions in zip(order, pool.map(predict, order), strict=True):
            assert predictions == models[job_id].reference(rows).argmax(1).tolist()
    assert len(cache) == 2


def test_the_route_is_in_openapi_with_its_json_body(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}/predict"]["post"]
    # JSON only, so generated clients import; the .npy body is described (app.api.routes.predict)
    assert set(operation["requestBody"]["content"]) == {"application/json"}
    assert "application/x-npy" in operation["requestBody"]["description"]
    assert {"200", "401", "404", "409", "422"} <= set(operation["responses"])
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/PredictionsPublic")
    assert json.dumps(operation).count("inputs") >= 1
