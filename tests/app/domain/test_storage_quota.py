"""A key's storage quota counts its uploads and its jobs' artifacts: a job reserves its
estimated checkpoints and model at submit, what its directory holds once an attempt ended
replaces the estimate, and a submit or an upload that would go over is a 507 naming
EPOCHAL_MAX_STORAGE_BYTES_PER_KEY. Both databases."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.core import config
from app.core.config import PRODUCTION_STORAGE_BYTES_PER_KEY, Settings, get_settings
from app.core.db import session_scope
from app.domain import retention
from app.domain.admission import disk_estimate
from app.domain.job_files import JobFiles
from app.domain.keys import Caller
from app.domain.tables import Job
from app.schemas.job_spec import JobSpec
from tests.app.api.test_datasets import images, npz
from tests.conftest import make_key

SPEC = {"framework": "pytorch", "dataset": {"name": "digits"}, "model": {"hidden_units": [512]}}


@pytest.fixture
def estimate(db_env: dict[str, str]) -> int:
    with session_scope() as session:
        found = disk_estimate(session, JobSpec.model_validate(SPEC), Caller("nobody", False))
    assert found is not None and found > 100_000  # two checkpoints and the model, 512 wide
    return found


@pytest.fixture
def client(estimate: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("EPOCHAL_MAX_STORAGE_BYTES_PER_KEY", str(estimate * 5 // 2))
    get_settings.cache_clear()
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('keeper')}"
        yield test_client


def test_jobs_reserve_their_estimate_and_then_count_what_they_keep(
    client: TestClient, estimate: int
) -> None:
    first, second = (client.post("/v1/jobs", json=SPEC) for _ in range(2))
    assert first.status_code == second.status_code == 201
    third = client.post("/v1/jobs", json=SPEC)  # room for two and a half estimates
    assert third.status_code == 507, third.text
    assert "EPOCHAL_MAX_STORAGE_BYTES_PER_KEY" in third.json()["detail"]
    assert "job artifacts" in third.json()["detail"]
    with session_scope() as session:
        assert session.get(Job, first.json()["id"]).disk_bytes == estimate  # type: ignore[union-attr]

    # The first job ran and kept less than its estimate: what it keeps is what counts.
    files = JobFiles.of(get_settings().resolved_artifacts_dir, first.json()["id"])
    files.root.mkdir(parents=True)
    files.log.write_bytes(b"z" * 1000)
    with session_scope() as session:
        retention.record_disk(session, get_settings().resolved_artifacts_dir, files.root.name)
    assert client.post("/v1/jobs", json=SPEC).status_code == 201


def test_an_upload_counts_the_jobs_artifacts_too(client: TestClient, estimate: int) -> None:
    content = npz(**images(n=20000))  # 20,000 x 36 uint8 and int64 labels: ~880 KB stored
    assert len(content) > estimate // 2
    for _ in range(2):
        assert client.post("/v1/jobs", json=SPEC).status_code == 201
    upload = client.post("/v1/datasets", files={"file": ("d.npz", content)})
    assert upload.status_code == 507, upload.text
    assert "EPOCHAL_MAX_STORAGE_BYTES_PER_KEY" in upload.json()["detail"]


def test_production_has_a_quota_by_default_and_0_turns_it_off() -> None:
    assert Settings().storage_quota_bytes is None  # the embedded default, as `make run`
    assert Settings(production=True).storage_quota_bytes == PRODUCTION_STORAGE_BYTES_PER_KEY
    assert Settings(production=True, max_storage_bytes_per_key=0).storage_quota_bytes is None
    assert Settings(max_storage_bytes_per_key=5000).storage_quota_bytes == 5000


def test_a_production_server_applies_its_default_quota(
    estimate: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config, "PRODUCTION_STORAGE_BYTES_PER_KEY", estimate * 3 // 2)
    monkeypatch.setenv("EPOCHAL_PRODUCTION", "true")  # EPOCHAL_MAX_STORAGE_BYTES_PER_KEY unset
    get_settings.cache_clear()
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('prod')}"
        assert client.post("/v1/jobs", json=SPEC).status_code == 201
        refused = client.post("/v1/jobs", json=SPEC)
    assert refused.status_code == 507, refused.text
    assert f"the quota is {estimate * 3 // 2}" in refused.json()["detail"]
