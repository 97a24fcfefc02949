"""The store's cleaner as the maintenance loop runs it: what dead writers left (prefixes without
a manifest, multipart uploads never completed) goes once past the grace period, for jobs that
have ended only; with the default store (the workers' staging) only the uploads."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from app.domain import retention
from app.domain.states import JobStatus
from app.services.maintenance import MaintenanceThread, clean_store
from app.storage.base import Store
from app.storage.checkpoint_sets import CheckpointSets, checkpoint_name
from app.storage.registry import get_store
from tests.app.api.test_artifacts import job_with_files
from tests.conftest import make_key
from tests.helpers import clear_caches, free_port
from tests.storage_server import BUCKET, SeaweedServer

PARTIAL = checkpoint_name(4, 40)  # a set whose writer died before its manifest


@pytest.fixture(params=["directory", "s3"])
def client(
    request: pytest.FixtureRequest,
    sqlite_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[TestClient]:
    """The app on a store that is not the artifacts directory: a folder, or SeaweedFS."""
    if request.param == "directory":
        monkeypatch.setenv("EPOCHAL_STORE_URL", (tmp_path / "shared").as_uri())
    else:
        server: SeaweedServer = request.getfixturevalue("seaweed")
        request.getfixturevalue("s3_env")
        monkeypatch.setenv("EPOCHAL_STORE_URL", f"s3://{BUCKET}/clean-{secrets.token_hex(4)}")
        monkeypatch.setenv("EPOCHAL_STORE_ENDPOINT", server.endpoint)
    clear_caches()
    yield from app_client()


@pytest.fixture
def default_client(sqlite_env: dict[str, str]) -> Iterator[TestClient]:
    yield from app_client()


def app_client() -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('owner')}"
        yield test_client


def sets_of(store: Store, job_id: str) -> CheckpointSets:
    return CheckpointSets(store, f"{job_id}/checkpoints")


def leave_behind(store: Store, job_id: str) -> None:
    """A whole set of epoch 3, and a partial one of epoch 4 (its writer killed mid-upload)."""
    sets_of(store, job_id).write(3, 30, {"torch.pt": b"w" * 64, "loop.json": b"{}"})
    store.put(f"{job_id}/checkpoints/{PARTIAL}/torch.pt", b"half")


def past_the_grace() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=get_settings().store_clean_grace_seconds + 60)


def test_what_dead_writers_left_goes_after_the_grace_for_ended_jobs_only(
    client: TestClient,
) -> None:
    ended, _ = job_with_files(client, JobStatus.failed)
    running, _ = job_with_files(client, JobStatus.running)
    store = get_store()
    for job_id in (ended, running):
        leave_behind(store, job_id)
    store.start_upload(f"{ended}/model/model.pt")  # a multipart upload never completed
    whole = checkpoint_name(3, 30)
    nothing = clean_store(get_settings())  # all of it younger than the grace: maybe in progress
    assert (nothing.prefixes, nothing.uploads) == ([], [])
    assert sets_of(store, ended).names() == [whole, PARTIAL]
    cleaned = clean_store(get_settings(), now=past_the_grace())
    assert cleaned.prefixes == [f"{ended}/checkpoints/{PARTIAL}/"]
    assert cleaned.uploads == [f"{ended}/model/model.pt"] and not store.list_uploads()
    assert sets_of(store, ended).names() == [whole]
    assert sets_of(store, ended).load(whole) is not None
    # A running job's prefixes are its writer's: a set being written is never taken from it.
    assert sets_of(store, running).names() == [whole, PARTIAL]


def test_with_the_default_store_only_stale_uploads_go(default_client: TestClient) -> None:
    ended, files = job_with_files(default_client, JobStatus.failed)
    store = get_store()
    (files.checkpoints / "epoch-0002").mkdir()  # a staging folder of old, without a manifest
    (files.checkpoints / "epoch-0002" / "loop.json").write_text("{}")
    store.start_upload(f"{ended}/model/model.pt")
    cleaned = clean_store(get_settings(), now=past_the_grace())
    assert (cleaned.prefixes, cleaned.uploads) == ([], [f"{ended}/model/model.pt"])
    assert (files.checkpoints / "epoch-0002" / "loop.json").exists()
    assert (files.checkpoints / "epoch-0003" / "model.pt").exists()


def test_the_retention_and_a_deleted_job_clear_the_store_too(client: TestClient) -> None:
    job_id, _ = job_with_files(client, JobStatus.succeeded)
    store = get_store()
    leave_behind(store, job_id)
    store.put(f"{job_id}/model/model.pt", b"m" * 10)
    assert retention.prune_checkpoints(get_settings().resolved_artifacts_dir, job_id)
    assert [info.key for info in store.list_objects(f"{job_id}/")] == [f"{job_id}/model/model.pt"]
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    assert not list(store.list_objects(f"{job_id}/"))


def test_a_store_that_is_down_is_one_warning_without_a_traceback(
    sqlite_env: dict[str, str],
    s3_env: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outage is expected, not a fault: the maintenance loop says so in one line (a
    traceback in the log reads as a bug), and cleans the next interval."""
    monkeypatch.setenv("EPOCHAL_STORE_URL", f"s3://{BUCKET}/down")
    monkeypatch.setenv("EPOCHAL_STORE_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # no one
    clear_caches()
    with caplog.at_level(logging.WARNING, logger="app.services.maintenance"):
        MaintenanceThread(get_settings(), "maintenance-test").clean_store()
    (record,) = caplog.records
    assert "waits for the store" in record.getMessage() and record.exc_info is None
