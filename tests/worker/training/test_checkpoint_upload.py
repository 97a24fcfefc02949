"""Checkpoints and models written through the store, in process, on a directory that is not
the staging and on SeaweedFS: sets with manifests beside training, a resume on a box with an
empty staging, a set failing its checksums skipped, one upload in flight, a store that is down.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.domain.states import ErrorCode, JobStatus
from app.storage.base import Store, StoreUnavailable
from app.storage.checkpoint_sets import MANIFEST, CheckpointSets, Manifest
from app.storage.registry import open_store
from tests.helpers import configure
from tests.storage_server import BUCKET, SeaweedServer, s3_store
from tests.throttling_proxy import ThrottlingServer, throttling
from tests.worker.training.inprocess import Killed, make_spec, run_spec
from worker.child.launch import classify
from worker.training.callbacks import Callback, Logs, TrainState
from worker.training.checkpoint import latest_epoch
from worker.training.checkpoint_upload import StoreCheckpoints, for_job

JOB = "0f0e0d0c-job"
SMALL = {"batch_size": 128}  # digits in 15 steps an epoch


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A store that is not the staging: a folder of its own, or a prefix in SeaweedFS."""
    if request.param == "directory":
        return open_store((tmp_path / "store").as_uri())
    server: SeaweedServer = request.getfixturevalue("seaweed")
    request.getfixturevalue("s3_env")
    return open_store(f"s3://{BUCKET}/w-{secrets.token_hex(4)}", server.endpoint)


def checkpoints(store: Store, staging: Path, wait: float = 60.0) -> StoreCheckpoints:
    return StoreCheckpoints(store, JOB, staging / "checkpoints", wait_seconds=wait)


class KillOnceUploaded(Callback):
    """Dies as epoch `epoch` is about to start, once the checkpoints before it are uploaded."""

    def __init__(self, epoch: int, uploads: StoreCheckpoints) -> None:
        self.epoch, self.uploads = epoch, uploads

    def on_epoch_begin(self, state: TrainState) -> None:
        if state.epoch + 1 == self.epoch:
            assert self.uploads.drain(60)
            raise Killed(f"killed before epoch {self.epoch}")


def test_a_trained_job_leaves_whole_sets_and_its_model_in_the_store(
    store: Store, tmp_path: Path
) -> None:
    uploads = checkpoints(store, tmp_path / "box")
    spec = make_spec("pytorch", training={"epochs": 3, **SMALL})
    run = run_spec(spec, tmp_path / "box", store=uploads)
    assert run.outcome.status == JobStatus.succeeded, run.outcome.error
    assert {"store_wait_s", "checkpoint_upload_s"} <= set(run.outcome.result["timings"])
    sets = CheckpointSets(store, f"{JOB}/checkpoints")
    latest = sets.latest()
    assert latest is not None and latest.epoch == 3
    # The newest two uploaded are kept. A checkpoint still waiting when a newer one comes is
    # given up for it (on a slow machine epoch 2's, while epoch 1's upload runs).
    uploaded = [epoch for epoch in (3, 2, 1) if epoch not in uploads.dropped]
    assert [m.epoch for m in sets.manifests()] == uploaded[:2]
    assert all(sets.load(m.name) is not None for m in sets.manifests())
    keys = {info.key for info in store.list_objects(f"{JOB}/checkpoints/")}
    assert {k.rsplit("/", 1)[1] for k in keys} >= {MANIFEST, "torch.pt", "loop.json"}
    assert not any(k.endswith("/latest") for k in keys)  # the staging's pointer stays local
    model = tmp_path / "box" / "model"
    for name in ("model.pt", "model.onnx", "model-card.json"):
        assert store.get(f"{JOB}/model/{name}") == (model / name).read_bytes(), name
    assert uploads.retries == 0 and len(uploads.published) == 3


def test_a_resume_on_another_box_starts_from_the_stores_latest_set(
    store: Store, tmp_path: Path
) -> None:
    spec = make_spec("pytorch", training={"epochs": 4, **SMALL})
    first = checkpoints(store, tmp_path / "box-a")
    with pytest.raises(Killed):
        run_spec(spec, tmp_path / "box-a", KillOnceUploaded(3, first), store=first)
    second = tmp_path / "box-b"  # another worker: nothing of box-a's on its disk
    resumed = run_spec(spec, second, store=checkpoints(store, second))
    assert resumed.outcome.status == JobStatus.succeeded, resumed.outcome.error
    assert [row["epoch"] for row in resumed.rows] == [3, 4]  # epochs 1 and 2 came from the store
    whole = run_spec(spec, tmp_path / "uninterrupted")
    for got, expected in zip(resumed.weights, whole.weights, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_a_set_that_fails_its_checksums_is_skipped_for_the_one_before(
    store: Store, tmp_path: Path
) -> None:
    spec = make_spec("pytorch", training={"epochs": 3, **SMALL})
    assert run_spec(spec, tmp_path / "a", store=checkpoints(store, tmp_path / "a")).outcome.result
    sets = CheckpointSets(store, f"{JOB}/checkpoints")
    newest = next(sets.manifests())
    store.put(f"{sets.root}{newest.name}/torch.pt", b"flipped bits")
    staging = tmp_path / "b" / "checkpoints"
    checkpoints(store, tmp_path / "b").fetch_newer(staging)
    assert latest_epoch(staging) == 2
    assert not [p for p in staging.iterdir() if p.name.startswith(".fetch-")]  # nothing left


def staged(root: Path, epoch: int) -> Path:
    folder = root / f"epoch-{epoch:04d}"
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(bytes([epoch]) * 1000)
    return folder


class GatedStore:
    """A real directory store whose uploads wait for a gate, counting how many run at once."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.gate, self.lock = inner, threading.Event(), threading.Lock()
        self.running = self.most = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def put_file(self, key: str, path: Path) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            assert self.gate.wait(30)
            self.inner.put_file(key, path)
        finally:
            with self.lock:
                self.running -= 1


def test_one_upload_in_flight_and_the_newest_waiting_replaces_an_older_one(
    tmp_path: Path,
) -> None:
    gated = GatedStore(open_store((tmp_path / "store").as_uri()))
    uploads = StoreCheckpoints(gated, JOB, tmp_path / "staging")  # type: ignore[arg-type]
    for epoch in (1, 2, 3):  # 1 is uploading (held at the gate) while 2, then 3, wait
        uploads.submit(staged(tmp_path / "staging", epoch), epoch, epoch * 10)
        time.sleep(0.1)
    assert uploads.held() == {"epoch-0001", "epoch-0003"} and uploads.dropped == [2]
    gated.gate.set()
    assert uploads.drain(30)
    assert [m.epoch for m in uploads.published] == [1, 3] and gated.most == 1
    sets = CheckpointSets(gated.inner, f"{JOB}/checkpoints")
    assert [m.epoch for m in sets.manifests()] == [3, 1]
    uploads.close()


def test_the_database_is_told_of_a_set_once_its_manifest_is_there_before_the_prune(
    tmp_path: Path,
) -> None:
    store = open_store((tmp_path / "store").as_uri())
    uploads = StoreCheckpoints(store, JOB, tmp_path / "staging", keep=1)
    sets = CheckpointSets(store, f"{JOB}/checkpoints")
    told: list[tuple[str, list[str]]] = []

    def point(manifest: Manifest) -> None:  # what the set's pointer would see, then fails
        told.append((manifest.name, [m.name for m in sets.manifests()]))
        raise RuntimeError("the database is away")

    uploads.on_published = point
    for epoch in (1, 2):
        uploads.submit(staged(tmp_path / "staging", epoch), epoch, epoch * 10)
        assert uploads.drain(30)
    first, second = (m.name for m in uploads.published)
    assert told == [(first, [first]), (second, [second, first])]  # the older not yet pruned
    assert [m.name for m in sets.manifests()] == [second]  # a failed pointer stops nothing
    uploads.close()


@pytest.fixture
def proxy(seaweed: SeaweedServer, s3_env: None) -> Iterator[ThrottlingServer]:
    """SeaweedFS behind a proxy that answers 503 SlowDown to everything until told not to."""
    with throttling(seaweed.endpoint, throttle=None) as server:
        yield server


class StoreDownMidJob(Callback):
    """The store down from epoch `down`'s end to epoch `up`'s; at each epoch's end, how many
    checkpoints the staging holds."""

    def __init__(self, staging: Path, proxy: ThrottlingServer, down: int, up: int) -> None:
        self.staging, self.proxy, self.down, self.up = staging, proxy, down, up
        self.counts: list[int] = []

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        self.counts.append(len(list(self.staging.glob("epoch-*"))))
        if state.epoch in (self.down, self.up):
            self.proxy.throttle_left = None if state.epoch == self.down else 0


def test_training_goes_on_while_the_store_is_down_and_its_checkpoints_land_after(
    proxy: ThrottlingServer, tmp_path: Path
) -> None:
    proxy.throttle_left = 0  # up at the start: the resume's look finds nothing
    store = s3_store(proxy, f"down-{secrets.token_hex(4)}", attempts=1)
    uploads = checkpoints(store, tmp_path / "box")
    outage = StoreDownMidJob(tmp_path / "box" / "checkpoints", proxy, down=1, up=5)
    spec = make_spec("pytorch", training={"epochs": 6, **SMALL})
    run = run_spec(spec, tmp_path / "box", outage, store=uploads)
    assert run.outcome.status == JobStatus.succeeded, run.outcome.error
    assert [row["epoch"] for row in run.rows] == list(range(1, 7))  # no epoch waited
    assert uploads.retries > 0 and max(outage.counts) <= 3  # the newest two, one uploading
    assert uploads.dropped  # checkpoints staged during the outage gave way to newer ones
    latest = CheckpointSets(store, f"{JOB}/checkpoints").latest()
    assert latest is not None and latest.epoch == 6
    assert store.head(f"{JOB}/model/model.pt").size > 0


def test_a_store_down_past_the_wait_fails_the_attempt_to_be_retried(
    proxy: ThrottlingServer, tmp_path: Path
) -> None:
    proxy.throttle_left = 0
    store = s3_store(proxy, f"down-{secrets.token_hex(4)}", attempts=1)
    uploads = checkpoints(store, tmp_path / "box", wait=1.0)
    outage = StoreDownMidJob(tmp_path / "box" / "checkpoints", proxy, down=1, up=99)
    spec = make_spec("pytorch", training={"epochs": 2, **SMALL})
    run = run_spec(spec, tmp_path / "box", outage, store=uploads)
    assert (run.outcome.status, run.outcome.error_code) == (
        JobStatus.failed,
        ErrorCode.infrastructure,
    )
    assert "did not take model.onnx" in (run.outcome.error or "")
    assert (tmp_path / "box" / "checkpoints" / "epoch-0002").is_dir()  # kept for the retry
    proxy.throttle_left = 0
    assert not list(store.list_objects(f"{JOB}/model/"))  # never a job without its model
    # A resume that cannot read the store does not guess: the attempt fails, retried.
    proxy.throttle_left = None
    with pytest.raises(StoreUnavailable) as raised:
        checkpoints(store, tmp_path / "other", wait=1.0).fetch_newer(tmp_path / "other")
    assert classify(raised.value).error_code == ErrorCode.infrastructure


def test_the_default_store_is_the_staging_and_nothing_is_uploaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_env: None
) -> None:
    home = tmp_path / "home"
    configure(monkeypatch, {"EPOCHAL_HOME": str(home)})
    artifacts = home / "artifacts"
    assert for_job(JOB, artifacts / JOB) is None
    configure(monkeypatch, {"EPOCHAL_HOME": str(home), "EPOCHAL_STORE_URL": artifacts.as_uri()})
    assert for_job(JOB, artifacts / JOB) is None  # the same folder, named
    elsewhere = (tmp_path / "shared").as_uri()
    configure(monkeypatch, {"EPOCHAL_HOME": str(home), "EPOCHAL_STORE_URL": elsewhere})
    assert for_job(JOB, artifacts / JOB) is not None
    s3 = {"EPOCHAL_STORE_URL": f"s3://{BUCKET}/x", "EPOCHAL_STORE_ENDPOINT": "http://127.0.0.1:9"}
    configure(monkeypatch, {"EPOCHAL_HOME": str(home), **s3})
    assert for_job(JOB, artifacts / JOB) is not None
