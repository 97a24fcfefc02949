"""No answer names where the server keeps its files. A job's error, its transitions
(on GET and in its event stream), its log and a predict 409 carried absolute paths of the data
and artifacts directories (a library's message, a traceback); each is cut to the file's name.
In-process, on both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.redact import without_server_paths
from app.domain.states import RequeueCause
from app.domain.tables import Job
from tests.conftest import make_key
from tests.onnx_models import write_model

BODY = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}


@pytest.fixture
def client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('user')}"
        yield test_client


def server_dirs() -> list[str]:
    settings = get_settings()
    return [str(settings.resolved_artifacts_dir), str(settings.resolved_data_dir)]


def assert_no_server_path(text: str) -> None:
    for folder in server_dirs():
        assert folder not in text, f"{folder} in {text[:500]}"


def test_messages_keep_file_names_api_paths_and_urls() -> None:
    cases = {
        "Load model from /srv/epochal/artifacts/ab/model.onnx failed": "…/model.onnx",
        "No such file or directory: '/data/datasets/abc.npz'": "'…/abc.npz'",
        'File "/usr/lib/python3.11/zipfile.py", line 3': '"…/zipfile.py"',
    }
    for message, kept in cases.items():
        assert kept in without_server_paths(message) and "/srv" not in without_server_paths(message)
    untouched = "see /v1/jobs/abc/logs, https://example.org/a/b, 3/4, application/x-npy"
    assert without_server_paths(untouched) == untouched


def test_a_jobs_error_transitions_events_and_log_name_no_server_path(client: TestClient) -> None:
    job_id = client.post("/v1/jobs", json=BODY).json()["id"]
    files = JobFiles.of(get_settings().resolved_artifacts_dir, job_id)
    data_file = get_settings().resolved_data_dir / "uploads" / "d.npz"
    with session_scope() as session:
        crud.claim_job(session, job_id, "w1", 30)
        job = session.get(Job, job_id)
        assert job is not None
        # A worker shutting down re-queues its job with the attempt's error in the reason.
        assert crud.requeue(session, job, RequeueCause.shutdown, str(files.onnx))
        crud.claim_job(session, job_id, "w1", 30)
        error = f"invalid_data: cannot read {data_file}: [Errno 2] in {files.root}/spec.json"
        crud.finish_job(session, job_id, 2, "failed", stop_reason="error", reason="t", error=error)
    files.log.parent.mkdir(parents=True, exist_ok=True)
    files.log.write_text(f'Traceback:\n  File "{files.root}/x.py", line 1\nOSError: {data_file}\n')

    shown = client.get(f"/v1/jobs/{job_id}")
    assert shown.status_code == 200
    assert "d.npz" in shown.json()["error"] and "model.onnx" in shown.text
    events = client.get(f"/v1/jobs/{job_id}/events")  # ends: the job is failed
    log = client.get(f"/v1/jobs/{job_id}/logs")
    assert events.status_code == log.status_code == 200
    assert "d.npz" in json.dumps(log.json()["lines"])
    for text in (shown.text, events.text, log.text):
        assert_no_server_path(text)


def test_a_predict_409_names_no_server_path(client: TestClient) -> None:
    job_id = client.post("/v1/jobs", json=BODY).json()["id"]
    with session_scope() as session:
        crud.claim_job(session, job_id, "w1", 30)
        crud.finish_job(session, job_id, 1, "succeeded", stop_reason="completed", reason="t")
    root = JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root
    write_model(root)
    JobFiles(root).onnx.write_bytes(b"garbage")  # ONNX Runtime's message names its full path
    response = client.post(f"/v1/jobs/{job_id}/predict", json={"inputs": [[0.0] * 64]})
    assert response.status_code == 409, response.text
    assert "cannot be loaded" in response.json()["detail"]
    assert_no_server_path(response.text)
