"""A 1 GiB model downloaded through a real API process from SeaweedFS: the API's memory stays
bounded (its peak RSS grows by a small fraction of the model's size)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.core.db import session_scope
from app.domain import crud
from app.domain.states import JobStatus
from app.storage.registry import open_store
from tests.conftest import make_service_env
from tests.helpers import configure, running_service, scaled
from tests.storage_server import BUCKET, SeaweedServer

MODEL_BYTES = 1024**3
BLOCK = os.urandom(1024 * 1024)  # repeated: no store compresses or dedupes it away
BOUND = 128 * 1024**2  # the API's peak may grow this much while it streams the whole model


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def big_file(path: Path) -> Path:
    with open(path, "wb") as out:
        for _ in range(MODEL_BYTES // len(BLOCK)):
            out.write(BLOCK)
    return path


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_1gib_model_streams_through_bounded_api_memory(
    seaweed: SeaweedServer, s3_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_env = {
        "EPOCHAL_STORE_URL": f"s3://{BUCKET}/large-{os.getpid()}",
        "EPOCHAL_STORE_ENDPOINT": seaweed.endpoint,
    }
    with make_service_env("sqlite", tmp_path / "home") as env:
        env |= store_env
        with running_service(env, worker=False) as service, service.client() as client:
            configure(monkeypatch, env)
            body = {"framework": "pytorch", "dataset": {"name": "digits"}, "name": "large"}
            job_id = client.post("/v1/jobs", json=body).json()["id"]
            with session_scope() as session:
                crud.claim_job(session, job_id, "w1", 30)
                crud.finish_job(
                    session, job_id, 1, JobStatus.succeeded, stop_reason="completed", reason="t"
                )
            store = open_store(env["EPOCHAL_STORE_URL"], seaweed.endpoint)
            store.put_file(f"{job_id}/model/model.pt", big_file(tmp_path / "model.pt"))
            (tmp_path / "model.pt").unlink()
            url = f"/v1/jobs/{job_id}/artifacts/model"
            assert client.get(url, headers={"Range": "bytes=0-9"}).content == BLOCK[:10]
            pid = service.processes["api"].pid
            before, got = peak_rss(pid), 0
            with client.stream("GET", url, timeout=scaled(300)) as response:
                assert response.status_code == 200
                for chunk in response.iter_bytes():
                    got += len(chunk)
            grown = peak_rss(pid) - before
            store.delete_prefix(f"{job_id}/")
    assert got == MODEL_BYTES
    assert grown < BOUND, f"the API's peak RSS grew {grown >> 20} MiB for a 1 GiB download"
