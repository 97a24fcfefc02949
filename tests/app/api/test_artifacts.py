"""Artifact routes, in-process: what is listed, when the model is served, and that nothing
outside the job's own files is ever read.

Real trained models are downloaded and loaded in tests/e2e/test_data_and_workers.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus
from tests.conftest import make_key

BODY = {"framework": "pytorch", "dataset": {"name": "digits"}, "name": "my job"}


@pytest.fixture
def client(sqlite_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('owner')}"
        yield test_client


def job_with_files(client: TestClient, status: JobStatus) -> tuple[str, JobFiles]:
    """A job moved through the real state machine, with files where the worker puts them."""
    job_id = client.post("/v1/jobs", json=BODY).json()["id"]
    with session_scope() as session:
        crud.claim_job(session, job_id, "w1", 30)
        if status != JobStatus.running:
            crud.finish_job(session, job_id, 1, status, stop_reason="completed", reason="test")
    files = JobFiles.of(get_settings().resolved_artifacts_dir, job_id)
    files.model_dir.mkdir(parents=True)
    files.model("pytorch").write_bytes(b"w" * 100)
    checkpoint = files.checkpoints / "epoch-0003"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.pt").write_bytes(b"c" * 40)
    (checkpoint / "loop.json").write_bytes(b"{}")
    files.latest.write_text("epoch-0003")
    files.spec.write_text("{}")
    files.log.write_text("hello\n")
    return job_id, files


def test_a_succeeded_job_lists_its_files_and_serves_its_model(client: TestClient) -> None:
    job_id, _ = job_with_files(client, JobStatus.succeeded)
    listing = client.get(f"/v1/jobs/{job_id}/artifacts").json()
    assert listing["input_shape"] == [8, 8] and listing["outputs"] == 10
    by_kind = {item["kind"]: item for item in listing["items"]}
    assert by_kind["model"] == {
        "kind": "model",
        "name": "model.pt",
        "size_bytes": 100,
        "epoch": None,
        "url": f"/v1/jobs/{job_id}/artifacts/model",
    }
    assert (by_kind["checkpoint"]["name"], by_kind["checkpoint"]["epoch"]) == ("epoch-0003", 3)
    assert by_kind["checkpoint"]["size_bytes"] == 42
    assert by_kind["spec"]["size_bytes"] == 2 and by_kind["log"]["size_bytes"] == 6
    model = client.get(f"/v1/jobs/{job_id}/artifacts/model")
    assert model.status_code == 200 and model.content == b"w" * 100
    assert f'filename="my-job-{job_id[:8]}.pt"' in model.headers["content-disposition"]


def test_a_succeeded_job_lists_and_serves_its_onnx_model_and_card(client: TestClient) -> None:
    job_id, files = job_with_files(client, JobStatus.succeeded)
    files.onnx.write_bytes(b"o" * 30)
    files.model_card.write_text('{"format_version": 1}')
    items = client.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]
    by_kind = {item["kind"]: item for item in items}
    assert [item["kind"] for item in items][:3] == ["model", "onnx", "model_card"]
    assert by_kind["onnx"]["url"] == f"/v1/jobs/{job_id}/artifacts/onnx"
    assert by_kind["onnx"]["size_bytes"] == 30 and by_kind["onnx"]["name"] == "model.onnx"
    assert by_kind["model_card"]["url"] == f"/v1/jobs/{job_id}/artifacts/model-card"
    onnx = client.get(f"/v1/jobs/{job_id}/artifacts/onnx")
    assert onnx.status_code == 200 and onnx.content == b"o" * 30
    assert f'filename="my-job-{job_id[:8]}.onnx"' in onnx.headers["content-disposition"]
    card = client.get(f"/v1/jobs/{job_id}/artifacts/model-card")
    assert card.json() == {"format_version": 1}
    assert card.headers["content-type"].startswith("application/json")
    assert f"my-job-{job_id[:8]}-model-card.json" in card.headers["content-disposition"]


def test_no_onnx_model_before_success_or_without_the_file(client: TestClient) -> None:
    job_id, files = job_with_files(client, JobStatus.running)
    files.onnx.write_bytes(b"o" * 30)
    kinds = [item["kind"] for item in client.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]]
    assert "onnx" not in kinds
    response = client.get(f"/v1/jobs/{job_id}/artifacts/onnx")
    assert response.status_code == 404 and "model.onnx" in response.json()["detail"]
    done, _ = job_with_files(client, JobStatus.succeeded)  # a model.pt, but no export
    assert client.get(f"/v1/jobs/{done}/artifacts/model-card").status_code == 404


def test_no_model_until_the_job_succeeded(client: TestClient) -> None:
    job_id, _ = job_with_files(client, JobStatus.running)
    kinds = [item["kind"] for item in client.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]]
    assert kinds == ["checkpoint", "spec", "log"]
    response = client.get(f"/v1/jobs/{job_id}/artifacts/model")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "status running" in response.json()["detail"]


def test_nothing_outside_the_job_directory_is_read(client: TestClient, tmp_path: Path) -> None:
    job_id, files = job_with_files(client, JobStatus.succeeded)
    secret = tmp_path / "secret"
    secret.write_text("private")
    files.model("pytorch").unlink()
    files.model("pytorch").symlink_to(secret)
    files.latest.write_text("../../../")
    files.log.unlink()
    files.log.symlink_to(secret)
    kinds = [item["kind"] for item in client.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]]
    assert kinds == ["spec"]
    assert client.get(f"/v1/jobs/{job_id}/artifacts/model").status_code == 404


def test_another_keys_job_is_404(client: TestClient) -> None:
    job_id, _ = job_with_files(client, JobStatus.succeeded)
    other = {"Authorization": f"Bearer {make_key('other')}"}
    for path in (f"/v1/jobs/{job_id}/artifacts", f"/v1/jobs/{job_id}/artifacts/model"):
        assert client.get(path, headers=other).status_code == 404
