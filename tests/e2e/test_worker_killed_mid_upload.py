"""A worker SIGKILLed, supervisor and training child at once, while a checkpoint's multipart upload
is open: a live service (PostgreSQL, Redis, the API, workers with homes of their own) on SeaweedFS
reached through a proxy that slows every request by its size, so a checkpoint of several parts
takes seconds to upload.

- The job's latest checkpoint (the database's pointer, the API's listing, the store's newest set
  with a manifest) names a set whose parts match its manifest's sha256, never the one cut off.
- A second worker resumes the job from that checkpoint, fetched from the store; it succeeds with
  rows 1..N once each.
- The killed upload stays open until the cleaner's round aborts it; after that round no multipart
  upload is open and no checkpoint prefix lacks its manifest.
"""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.config import get_settings
from app.services.maintenance import clean_store
from app.storage.checkpoint_sets import MANIFEST, CheckpointSets, Manifest
from app.storage.s3 import S3Store
from tests.e2e.procs import alive, training_children
from tests.helpers import (
    Service,
    clear_caches,
    latest_checkpoint,
    metric_attempts,
    running_service,
    wait_for_status,
    wait_until,
)
from tests.storage_server import BUCKET, CREDENTIALS, SeaweedServer, s3_store, s3_store_env
from tests.throttling_proxy import ThrottlingServer, throttling

pytestmark = pytest.mark.e2e

SECONDS_PER_MIB = 0.1  # a ~50 MB checkpoint: about 5 s in the store, its 16 MiB parts 1.6 s each
EPOCHS = 5
# 4.3 M weights: a checkpoint (weights and Adam's two moments) of ~50 MB, a multipart upload of
# several parts; ten steps an epoch.
JOB: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 500, "features": 32},
    "model": {"hidden_units": [2048, 2048]},
    "training": {"epochs": EPOCHS, "batch_size": 50},
}
SETTINGS = {
    "EPOCHAL_HEARTBEAT_SECONDS": "1",
    "EPOCHAL_LEASE_SECONDS": "3",
    "EPOCHAL_MAINTENANCE_SECONDS": "1",
    "EPOCHAL_DISPATCH_RETRY_SECONDS": "3",
}


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"worker-kill-{secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def proxy(seaweed: SeaweedServer) -> Iterator[ThrottlingServer]:
    """SeaweedFS on a slow link: never throttled, every request held by its body's size."""
    with throttling(seaweed.endpoint, throttle=0, seconds_per_mib=SECONDS_PER_MIB) as server:
        yield server


@pytest.fixture(scope="module")
def service(
    pg_service_env: dict[str, str],
    proxy: ThrottlingServer,
    prefix: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    """The API (no worker yet) on the slowed S3 store."""
    store = s3_store_env(proxy.endpoint, prefix, tmp_path_factory.mktemp("aws"))
    with running_service({**pg_service_env, **store}, worker=False, **SETTINGS) as svc:
        yield svc


@pytest.fixture
def store(seaweed: SeaweedServer, prefix: str, monkeypatch: pytest.MonkeyPatch) -> S3Store:
    """The test's own view of the service's store, straight to SeaweedFS (not slowed)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return s3_store(seaweed, prefix)


def open_upload(seaweed: SeaweedServer, prefix: str, job_id: str) -> str | None:
    """The key (under the store's prefix) of an open multipart upload of the job's checkpoints,
    as boto3 lists them on the bucket."""
    root = f"{prefix}/{job_id}/checkpoints/"
    listed = seaweed.client().list_multipart_uploads(Bucket=BUCKET, Prefix=root)
    uploads = listed.get("Uploads") or []
    return str(uploads[0]["Key"]).removeprefix(f"{prefix}/") if uploads else None


def kill_the_box(service: Service, job_id: str) -> None:
    """SIGKILL the worker's process group and the training child's (a group of its own)."""
    children = training_children(job_id)
    assert children, "no training child to kill"
    worker = service.processes.pop("worker-a")
    os.killpg(worker.pid, signal.SIGKILL)
    for pid in children:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    worker.wait()
    wait_until(lambda: not any(alive(p) for p in children), 10, "the training child to die")


def whole_latest(store: S3Store, job_id: str) -> Manifest:
    """The store's latest checkpoint, its parts checked against its manifest's sha256."""
    sets = CheckpointSets(store, f"{job_id}/checkpoints")
    latest = sets.latest()
    assert latest is not None
    assert sets.load(latest.name) is not None, f"{latest.name} fails its checksums"
    return latest


def listed_checkpoint(client: httpx.Client, job_id: str) -> int:
    """The epoch of the checkpoint the API lists for the job."""
    items = client.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]
    return int(next(item for item in items if item["kind"] == "checkpoint")["epoch"])


def cleaner_round(service: Service, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The maintenance loop's store cleaning, its grace at the lowest the setting takes, run as
    that long after now; the keys of the uploads it aborted."""
    for name, value in {**service.env, "EPOCHAL_STORE_CLEAN_GRACE_SECONDS": "60"}.items():
        monkeypatch.setenv(name, value)
    clear_caches()
    try:
        settings = get_settings()
        later = datetime.now(UTC) + timedelta(seconds=settings.store_clean_grace_seconds + 1)
        return clean_store(settings, later).uploads
    finally:
        clear_caches()


def resumed_on_a_second_box(
    service: Service, client: httpx.Client, job_id: str, latest: Manifest, home: Path
) -> None:
    """A worker with a home of its own takes the job on: it resumes from `latest`, fetched from
    the store, and succeeds with rows 1..EPOCHS once each."""
    service.start_worker("worker-b", {"EPOCHAL_HOME": str(home)})
    try:
        done = wait_for_status(client, job_id, {"succeeded", "failed", "cancelled"}, 240)
    finally:
        service.stop("worker-b")
    assert done["status"] == "succeeded", done["error"]
    assert done["attempt"] == 2
    rows = metric_attempts(service, job_id)
    assert [epoch for epoch, _ in rows] == list(range(1, EPOCHS + 1))  # once each
    kept = [epoch for epoch, attempt in rows if attempt == 1]
    assert kept == list(range(1, latest.epoch + 1)), rows  # resumed from that set, no later
    log = (home / "artifacts" / job_id / "job.log").read_text()
    assert f"took the checkpoint of epoch {latest.epoch} from the store" in log


def test_a_worker_killed_mid_upload_leaves_the_latest_whole_and_nothing_after_the_cleaner(
    service: Service,
    seaweed: SeaweedServer,
    prefix: str,
    store: S3Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service.start_worker("worker-a", {"EPOCHAL_HOME": str(tmp_path / "a-home")})
    with service.client() as client:
        job_id = client.post("/v1/jobs", json=JOB).json()["id"]
        sets = CheckpointSets(store, f"{job_id}/checkpoints")
        # A set whole, then a newer one's upload open: killed between two of its parts.
        wait_until(sets.latest, 120, "a first checkpoint in the store")
        cut = wait_until(lambda: open_upload(seaweed, prefix, job_id), 60, "an open upload", 0.02)
        kill_the_box(service, job_id)
        cut_name = cut.removeprefix(sets.root).split("/", 1)[0]
        latest = whole_latest(store, job_id)
        assert latest.name < cut_name and sets.manifest(cut_name) is None, (latest, cut)
        # The database, the API and the store name the whole set, not the one cut off.
        assert latest_checkpoint(service, job_id) == latest.name
        assert listed_checkpoint(client, job_id) == latest.epoch
        assert open_upload(seaweed, prefix, job_id) == cut  # left open by the dead writer
        resumed_on_a_second_box(service, client, job_id, latest, tmp_path / "b-home")
    last = whole_latest(store, job_id)
    assert last.epoch == EPOCHS and latest_checkpoint(service, job_id) == last.name

    assert cut in cleaner_round(service, monkeypatch)  # the dead writer's upload, aborted
    listed = seaweed.client().list_multipart_uploads(Bucket=BUCKET, Prefix=f"{prefix}/")
    assert not listed.get("Uploads"), listed["Uploads"]
    keys = {info.key for info in store.list_objects(f"{job_id}/checkpoints/")}
    names = {key.removeprefix(sets.root).split("/", 1)[0] for key in keys}
    assert names and all(f"{sets.root}{name}/{MANIFEST}" in keys for name in names), keys
