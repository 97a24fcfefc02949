"""`epochal datasets upload DIR` on a live service (PostgreSQL, Redis, a real Celery worker):
an image folder, or a directory of WebDataset tar shards, is packed and sent as a resumable
upload; cut off after its first part, the same command finishes that upload. The data set
becomes ready with the directory's rows and classes and the version the same directory
registered by reference gets, and the packed tar leaves the cache folder once sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochal_client import datasets_cli, packed, resumable
from epochal_client.client import Client
from epochal_client.resumable import PART_BYTES, UploadFields, state_path, upload
from tests.e2e.test_dataset_ingest import CutOff, epochal  # the ingest tests' CLI call and cut-off
from tests.helpers import Service, running_service, wait_until
from tests.shard_data import image_bytes, npy_bytes, write_image_folder, write_webdataset

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data-root")


@pytest.fixture(scope="module")
def service(pg_service_env: dict[str, str], roots: Path) -> Iterator[Service]:
    # No warm training process: these tests train nothing.
    with running_service(
        pg_service_env, EPOCHAL_WARM_FRAMEWORKS="", EPOCHAL_DATA_ROOTS=str(roots)
    ) as svc:
        yield svc


def cut_after_first_part(done: int, total: int) -> None:
    if done > 0:
        raise CutOff


def ready(service: Service, cache: Path, dataset_id: str) -> dict[str, object]:
    with Client(service.url, service.api_key) as client:
        wait_until(
            lambda: client.dataset(dataset_id).status != "ingesting",
            60,
            f"data set {dataset_id} to leave ingesting",
        )
    shown = epochal(service, cache, "datasets", "show", dataset_id, "--json")
    assert shown.returncode == 0, shown.stderr
    resource: dict[str, object] = json.loads(shown.stdout)
    return resource


def rerun_finishes_the_upload(service: Service, cache: Path, folder: Path) -> dict[str, Any]:
    """`epochal datasets upload FOLDER` again, after one cut off: it finishes that upload (the
    one the client's state holds), removes its packed tar, and the data set becomes ready."""
    (held,) = json.loads(state_path().read_text()).values()
    sent = epochal(service, cache, "datasets", "upload", str(folder))
    assert sent.returncode == 0, sent.stderr
    uploaded = ready(service, cache, sent.stdout.strip())
    assert uploaded["status"] == "ready", uploaded.get("error")
    with Client(service.url, service.api_key) as client:  # the rerun finished the cut-off one
        gone = client._http.get(f"/v1/datasets/uploads/{held['id']}")
        assert gone.status_code == 404
    assert list((cache / "epochal" / "packed").iterdir()) == []  # the tar is gone once sent
    return uploaded


def added_by_reference_is_the_same(
    service: Service, cache: Path, folder: Path, uploaded: dict[str, Any]
) -> None:
    """The folder registered by reference has the uploaded one's version: the index, so the
    version, holds the class names and the records in their order."""
    added = epochal(service, cache, "datasets", "add", str(folder))
    assert added.returncode == 0, added.stderr
    assert ready(service, cache, added.stdout.strip())["version"] == uploaded["version"]


def test_an_uploaded_image_folder_resumes_and_becomes_ready_with_its_classes(
    service: Service, roots: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(3)
    noise = (rng.integers(0, 256, (320, 320, 3), dtype=np.uint8) for _ in range(30))
    images = {name: [image_bytes(next(noise)) for _ in range(10)] for name in ("a", "b", "c")}
    folder = write_image_folder(roots / "shapes", images)  # 30 PNGs of noise: over one part
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # the CLI's below, too
    tar = packed.packed(folder)
    assert tar.stat().st_size > PART_BYTES
    with Client(service.url, service.api_key) as client, pytest.raises(CutOff):
        upload(client, tar, UploadFields("shapes", format="image_folder"), cut_after_first_part)
    uploaded = rerun_finishes_the_upload(service, cache, folder)
    assert (uploaded["rows"], uploaded["classes"], uploaded["name"]) == (30, 3, "shapes")
    assert (uploaded["format"], uploaded["shape"]) == ("image_folder", [320, 320, 3])
    added_by_reference_is_the_same(service, cache, folder, uploaded)


def test_an_uploaded_directory_of_tar_shards_is_webdataset_resumes_and_becomes_ready(
    service: Service, roots: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    folder = roots / "stack"
    folder.mkdir()
    for shard in range(3):  # 30 samples of 320 x 320 x 3 bytes: over one part
        samples = [
            (f"{shard}{n:04d}", {"npy": npy_bytes(rng.integers(0, 256, (320, 320, 3), np.uint8))})
            for n in range(10)
        ]
        for n, (_, parts) in enumerate(samples):
            parts["cls"] = str(n % 3).encode()
        write_webdataset(folder / f"shard-{shard:03d}.tar", samples)
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("EPOCHAL_URL", service.url)
    monkeypatch.setenv("EPOCHAL_API_KEY", service.api_key)
    sent_whole = resumable.upload

    def cut_off(client: Client, path: Path, fields: UploadFields, _: object) -> dict[str, Any]:
        return sent_whole(client, path, fields, cut_after_first_part)

    # The command itself, without --format, cut off after its first part: the upload it
    # opened says which format the data set is.
    monkeypatch.setattr(resumable, "upload", cut_off)
    with pytest.raises(CutOff):
        datasets_cli.datasets_upload(folder, None, None, None, None, None, False)
    monkeypatch.setattr(resumable, "upload", sent_whole)
    uploaded = rerun_finishes_the_upload(service, cache, folder)
    assert (uploaded["rows"], uploaded["classes"], uploaded["name"]) == (30, 3, "stack")
    assert (uploaded["format"], uploaded["shape"]) == ("webdataset", [320, 320, 3])
    added_by_reference_is_the_same(service, cache, folder, uploaded)
