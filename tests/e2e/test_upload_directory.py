"""`epochal datasets upload DIR` on a live service (PostgreSQL, Redis, a real Celery worker):
an image folder is packed and sent as a resumable upload; cut off after its first part, the
same command finishes that upload. The data set becomes ready with the folder's classes and
the version the same folder registered by reference gets, and the packed tar leaves the cache
folder once sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from epochal_client import packed
from epochal_client.client import Client
from epochal_client.resumable import PART_BYTES, UploadFields, state_path, upload
from tests.e2e.test_dataset_ingest import CutOff, epochal  # the ingest tests' CLI call and cut-off
from tests.helpers import Service, running_service, wait_until
from tests.shard_data import image_bytes, write_image_folder

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
    (held,) = json.loads(state_path().read_text()).values()
    sent = epochal(service, cache, "datasets", "upload", str(folder))
    assert sent.returncode == 0, sent.stderr
    uploaded = ready(service, cache, sent.stdout.strip())
    assert uploaded["status"] == "ready", uploaded.get("error")
    assert (uploaded["rows"], uploaded["classes"], uploaded["name"]) == (30, 3, "shapes")
    assert (uploaded["format"], uploaded["shape"]) == ("image_folder", [320, 320, 3])
    with Client(service.url, service.api_key) as client:  # the rerun finished the cut-off one
        gone = client._http.get(f"/v1/datasets/uploads/{held['id']}")
        assert gone.status_code == 404
    assert list((cache / "epochal" / "packed").iterdir()) == []  # the tar is gone once sent
    added = epochal(service, cache, "datasets", "add", str(folder))
    assert added.returncode == 0, added.stderr
    by_reference = ready(service, cache, added.stdout.strip())
    # The index, so the version, holds the class names and the records in their order.
    assert by_reference["version"] == uploaded["version"]
