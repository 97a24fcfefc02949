"""The S3 store (a SeaweedFS of these tests' own) SIGKILLed under a live service: PostgreSQL,
Redis, the API and a worker on it.

- A resumable data set upload whose store dies between parts: the part answers 503 with
  Retry-After (no traceback, nothing recorded), and once the store is back `epochal datasets
  upload` run again sends the rest from the offset the server holds; the checksum matches and
  the data set becomes ready.
- A job whose store dies in the middle of a checkpoint's multipart upload and stays down for
  30 s: training goes on, the job succeeds once the store is back, the latest checkpoint is
  whole and names the last epoch, and after the cleaner's round no multipart upload is open
  and no prefix lacks its manifest.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.core.config import get_settings
from app.services.maintenance import clean_store
from app.storage.checkpoint_sets import MANIFEST, CheckpointSets
from app.storage.s3 import S3Store
from epochal_client.client import Client
from epochal_client.resumable import UploadFields, state_path, upload
from tests.helpers import (
    Service,
    clear_caches,
    latest_checkpoint,
    metric_attempts,
    run_cli,
    running_service,
    wait_for_status,
    wait_until,
)
from tests.storage_server import CREDENTIALS, SeaweedServer, s3_store, start_seaweed

pytestmark = pytest.mark.e2e

PART = 8 * 2**20  # the client's part size
OUTAGE_SECONDS = 30.0
EPOCHS = 12  # about a second an epoch: several train while the store is down
# 4.3 M weights: a checkpoint (weights and Adam's two moments) of ~50 MB, a multipart upload
# of several parts that takes long enough to be killed in the middle of.
JOB: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 1000, "features": 32},
    "model": {"hidden_units": [2048, 2048]},
    "training": {"epochs": EPOCHS, "batch_size": 50},
}


class CutOff(Exception):
    """The client going away after its first part."""


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """A store these tests may kill: not the session's shared one."""
    server = start_seaweed(tmp_path_factory.mktemp("weed-outage") / "data")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"outage-{secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def service(
    pg_service_env: dict[str, str],
    weed: SeaweedServer,
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    store = weed.store_env(prefix, tmp_path_factory.mktemp("aws"))
    with running_service({**pg_service_env, **store}, EPOCHAL_WARM_FRAMEWORKS="") as svc:
        yield svc


@pytest.fixture
def store(weed: SeaweedServer, prefix: str, monkeypatch: pytest.MonkeyPatch) -> S3Store:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return s3_store(weed, prefix)


@pytest.fixture
def restarted(weed: SeaweedServer) -> Iterator[SeaweedServer]:
    """The store, started again after the test whatever it did to it."""
    yield weed
    if weed.process.poll() is not None:
        weed.restart()


def api_log(service: Service) -> str:
    return (service.logs / f"{Path(service.env['EPOCHAL_HOME']).parent.name}-api.log").read_text()


def an_npz(path: Path) -> Path:
    """~17.6 MB of images and labels: three parts of the client's."""
    rng = np.random.default_rng(1)
    buffer = io.BytesIO()
    np.savez(buffer, x=rng.integers(0, 256, (2100, 8192), dtype=np.uint8), y=np.arange(2100) % 3)
    path.write_bytes(buffer.getvalue())
    return path


def epochal(service: Service, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(service, *args, env={"XDG_CACHE_HOME": str(cache)})


def test_a_store_killed_mid_upload_answers_503_and_the_rerun_completes_from_the_offset(
    service: Service,
    restarted: SeaweedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = an_npz(tmp_path / "images.npz")
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))

    def cut_after_first_part(done: int, total: int) -> None:
        if done > 0:
            raise CutOff

    with Client(service.url, service.api_key) as client, pytest.raises(CutOff):
        upload(client, path, UploadFields("images"), cut_after_first_part)
    (held,) = json.loads(state_path().read_text()).values()
    route = f"/v1/datasets/uploads/{held['id']}"
    restarted.kill()
    second = path.read_bytes()[PART : 2 * PART]
    with service.client() as http:
        headers = {"Content-Range": f"bytes {PART}-{2 * PART - 1}/{path.stat().st_size}"}
        answer = http.put(route, content=second, headers=headers)
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["Retry-After"]) > 0
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert "store unavailable" in answer.json()["detail"]
        assert http.get(route).json()["offset"] == PART  # nothing half-recorded
    assert "Traceback" not in api_log(service)
    down = epochal(service, cache, "datasets", "upload", str(path))
    assert down.returncode != 0 and "Traceback" not in down.stderr
    assert "store unavailable" in " ".join(down.stderr.split())
    restarted.restart()
    rerun = epochal(service, cache, "datasets", "upload", str(path))
    assert rerun.returncode == 0, rerun.stderr
    dataset_id = rerun.stdout.strip()
    with Client(service.url, service.api_key) as client:
        status = wait_until(
            lambda: (s := client.dataset(dataset_id).status) != "ingesting" and s, 60, "ingest"
        )
        dataset = client.dataset(dataset_id)
        assert status == "ready", dataset.raw.get("error")
        assert dataset.raw["checksum"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert client._http.get(route).status_code == 404  # that upload was finished, not another


def whole_and_clean(store: S3Store, job_id: str) -> None:
    """Every checkpoint prefix of the job has its manifest and checksummed parts; no multipart
    upload is open under it (the whole bucket's are another test's: a data set upload that
    test left open when it failed is not this one's)."""
    sets = CheckpointSets(store, f"{job_id}/checkpoints")
    assert sets.names() and all(sets.load(name) is not None for name in sets.names())
    keys = {info.key for info in store.list_objects(f"{job_id}/checkpoints/")}
    prefixes = {key.removeprefix(sets.root).split("/", 1)[0] for key in keys}
    assert all(f"{sets.root}{name}/{MANIFEST}" in keys for name in prefixes), sorted(keys)
    assert not store.list_uploads(f"{job_id}/")


def cleaner_round(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    """The maintenance loop's store cleaning, run here past its grace period."""
    for name, value in service.env.items():
        monkeypatch.setenv(name, value)
    clear_caches()
    settings = get_settings()
    clean_store(settings, datetime.now(UTC) + timedelta(seconds=settings.store_clean_grace_seconds))
    clear_caches()


def test_a_store_down_30s_mid_job_the_job_trains_on_and_its_checkpoints_land(
    service: Service,
    restarted: SeaweedServer,
    store: S3Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with service.client() as http:
        job_id = http.post("/v1/jobs", json=JOB).json()["id"]
        wait_until(lambda: len(metric_attempts(service, job_id)) >= 2, 120, "epoch 2's row")
        wait_until(
            lambda: store.list_uploads(f"{job_id}/"), 60, "a checkpoint's upload", interval=0.02
        )
        restarted.kill()  # mid-upload: its parts half sent, the upload left open
        at_kill = len(metric_attempts(service, job_id))
        time.sleep(OUTAGE_SECONDS)
        # Training went on without the store (the attempt then waits for it to put the model).
        rows = metric_attempts(service, job_id)
        assert len(rows) >= min(EPOCHS, at_kill + 2), (at_kill, rows)
        assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
        restarted.restart()
        done = wait_for_status(http, job_id, {"succeeded", "failed", "cancelled"}, 180)
        assert done["status"] == "succeeded", done["error"]
        assert done["attempt"] == 1
        assert http.get(f"/v1/jobs/{job_id}/artifacts/model").status_code == 200
    assert metric_attempts(service, job_id) == [(epoch, 1) for epoch in range(1, EPOCHS + 1)]
    latest = CheckpointSets(store, f"{job_id}/checkpoints").latest()
    assert latest is not None and latest.epoch == EPOCHS
    assert latest_checkpoint(service, job_id) == latest.name  # the database's, whole too
    cleaner_round(service, monkeypatch)
    whole_and_clean(store, job_id)
