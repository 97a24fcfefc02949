"""DELETE /v1/jobs/{id} and the retention: finished jobs' rows and files go, nothing else does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import epoch_rows
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus
from app.domain.tables import EpochMetric, Job, JobTransition, utcnow
from app.services.maintenance import apply_retention
from tests.conftest import make_key

BODY = {"framework": "pytorch", "dataset": {"name": "digits"}}


@pytest.fixture
def client(db_env: dict[str, str], api_key: str) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {api_key}"
        yield test_client


def finished_job(client: TestClient, days_ago: float = 0) -> tuple[str, JobFiles]:
    """A job that ran one epoch and succeeded, with a checkpoint and a model on disk."""
    job_id = client.post("/v1/jobs", json=BODY).json()["id"]
    with session_scope() as session:
        session.execute(
            update(Job).where(Job.id == job_id).values(status=JobStatus.running, attempt=1)
        )
        epoch_rows.record_epoch(session, job_id, 1, 1, {"train_loss": 0.5})
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(status=JobStatus.succeeded, finished_at=utcnow() - timedelta(days=days_ago))
        )
    files = JobFiles.of(get_settings().resolved_artifacts_dir, job_id)
    (files.checkpoints / "epoch-0001").mkdir(parents=True)
    files.latest.write_text("epoch-0001")
    files.model_dir.mkdir()
    files.model("pytorch").write_bytes(b"model")
    files.log.write_text("trained\n")
    return job_id, files


def rows_of(job_id: str) -> tuple[int, int, int]:
    with session_scope() as session:
        return tuple(  # type: ignore[return-value]
            session.scalar(select(func.count()).select_from(t).where(t.job_id == job_id))
            for t in (EpochMetric, JobTransition)
        ) + (session.scalar(select(func.count()).where(Job.id == job_id)),)


def test_deleting_a_finished_job_removes_rows_and_files(client: TestClient) -> None:
    job_id, files = finished_job(client)
    assert rows_of(job_id)[0] == 1 and files.root.is_dir()
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    assert rows_of(job_id) == (0, 0, 0)
    assert not files.root.exists()
    assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 404


@pytest.mark.parametrize("state", [JobStatus.queued, JobStatus.running, JobStatus.cancelling])
def test_a_job_that_has_not_ended_is_409(client: TestClient, state: JobStatus) -> None:
    job_id = client.post("/v1/jobs", json=BODY).json()["id"]
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status=state))
    response = client.delete(f"/v1/jobs/{job_id}")
    assert response.status_code == 409, response.text
    assert rows_of(job_id)[2] == 1


def test_only_the_owner_or_an_admin_deletes(client: TestClient) -> None:
    job_id, files = finished_job(client)
    other = {"Authorization": f"Bearer {make_key('other')}"}
    assert client.delete(f"/v1/jobs/{job_id}", headers=other).status_code == 404
    assert files.root.is_dir() and rows_of(job_id)[2] == 1
    admin = {"Authorization": f"Bearer {make_key('root', admin=True)}"}
    assert client.delete(f"/v1/jobs/{job_id}", headers=admin).status_code == 204
    assert rows_of(job_id)[2] == 0


def retain(monkeypatch: pytest.MonkeyPatch, delete_jobs: bool) -> int:
    monkeypatch.setattr(get_settings(), "retention_days", 7.0)
    monkeypatch.setattr(get_settings(), "retention_delete_jobs", delete_jobs)
    return apply_retention(get_settings())


def test_retention_is_off_by_default(client: TestClient) -> None:
    _, files = finished_job(client, days_ago=400)
    assert get_settings().retention_days is None
    assert apply_retention(get_settings()) == 0 and files.checkpoints.is_dir()


def test_retention_prunes_old_checkpoints_but_keeps_the_model(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    (old, old_files), (new, new_files) = finished_job(client, 8), finished_job(client, 1)
    for job_id in (old, new):
        pointed = update(Job).where(Job.id == job_id).values(latest_checkpoint="epoch-0002")
        with session_scope() as session:
            session.execute(pointed)
    assert retain(monkeypatch, delete_jobs=False) == 1
    with session_scope() as session:  # the database names no checkpoint it removed
        assert session.get(Job, old).latest_checkpoint is None  # type: ignore[union-attr]
        assert session.get(Job, new).latest_checkpoint == "epoch-0002"  # type: ignore[union-attr]
    assert not old_files.checkpoints.exists() and old_files.model("pytorch").is_file()
    assert new_files.checkpoints.is_dir()
    assert rows_of(old)[2] == 1 and rows_of(new)[2] == 1
    assert retain(monkeypatch, delete_jobs=False) == 0  # nothing left to prune


def test_retention_can_delete_whole_jobs(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    (old, old_files), (new, new_files) = finished_job(client, 8), finished_job(client, 1)
    queued = client.post("/v1/jobs", json=BODY).json()["id"]
    assert retain(monkeypatch, delete_jobs=True) == 1
    assert rows_of(old) == (0, 0, 0) and not old_files.root.exists()
    assert rows_of(new)[2] == 1 and new_files.root.is_dir()
    assert rows_of(queued)[2] == 1


def test_the_client_deletes_and_the_cli_has_the_verb(client: TestClient) -> None:
    from typer.testing import CliRunner

    from epochal_client.cli import build_cli
    from epochal_client.client import Client

    job_id, files = finished_job(client)
    api = Client(url="http://testserver", api_key="unused")
    api._http = client  # the in-process app (with its key) instead of a socket
    api.delete_job(job_id)
    assert not files.root.exists()
    result = CliRunner().invoke(build_cli(), ["delete", "--help"])
    assert result.exit_code == 0 and "Delete a finished job" in result.output
