"""Data sets past one request on a live service (PostgreSQL, Redis, a real Celery worker): an
upload cut off after its first part is finished by rerunning `epochal datasets upload`, and the
worker's ingest task makes it ready; a CSV with a short row fails, `datasets show` naming the
file and the record; a path outside the allowed roots is refused."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from epochal_client.client import Client
from epochal_client.resumable import UploadFields, state_path, upload
from tests.helpers import Service, run_cli, running_service, wait_until

pytestmark = pytest.mark.e2e


class CutOff(Exception):
    """The client going away after its first part."""


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


def epochal(service: Service, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(service, *args, env={"XDG_CACHE_HOME": str(cache)})


def settled(service: Service, dataset_id: str) -> str:
    with Client(service.url, service.api_key) as client:
        return wait_until(
            lambda: (s := client.dataset(dataset_id).status) != "ingesting" and s,
            60,
            f"data set {dataset_id} to leave ingesting",
        )


def test_an_upload_cut_off_halfway_is_finished_by_a_rerun(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    np.savez(buf, x=rng.integers(0, 256, (1400, 8192), dtype=np.uint8), y=np.arange(1400) % 4)
    path = tmp_path / "images.npz"
    path.write_bytes(buf.getvalue())  # ~11.5 MB: two parts of 8 MiB
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def cut_after_first_part(done: int, total: int) -> None:
        if done > 0:
            raise CutOff

    with Client(service.url, service.api_key) as client, pytest.raises(CutOff):
        upload(client, path, UploadFields("images"), cut_after_first_part)
    (held,) = json.loads(state_path().read_text()).values()
    with Client(service.url, service.api_key) as client:
        assert client._json("GET", f"/v1/datasets/uploads/{held['id']}")["offset"] == 8 * 2**20
    rerun = epochal(service, tmp_path / "cache", "datasets", "upload", str(path))
    assert rerun.returncode == 0, rerun.stderr
    dataset_id = rerun.stdout.strip()
    assert settled(service, dataset_id) == "ready"
    shown = epochal(service, tmp_path / "cache", "datasets", "show", dataset_id)
    assert shown.returncode == 0, shown.stderr
    rows = (line.split(None, 1) for line in shown.stdout.splitlines() if line.strip())
    lines = {field: value.strip() for field, value in rows}
    assert lines["status"] == "ready" and lines["rows"] == "1400" and lines["classes"] == "4"
    with Client(service.url, service.api_key) as client:
        dataset = client.dataset(dataset_id)
        assert dataset.raw["checksum"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert lines["version"] == dataset.version and len(dataset.version or "") == 64
        gone = client._http.get(f"/v1/datasets/uploads/{held['id']}")
        assert gone.status_code == 404  # the rerun finished that upload, not a new one


def test_a_short_csv_row_fails_the_ingest_naming_file_and_record(
    service: Service, roots: Path, tmp_path: Path
) -> None:
    table = roots / "short.csv"
    table.write_text("a,b,label\n1,2,0\n3,4,1\n5,6\n")
    added = epochal(service, tmp_path, "datasets", "add", str(table), "--label-column", "label")
    assert added.returncode == 0, added.stderr
    dataset_id = added.stdout.strip()
    assert settled(service, dataset_id) == "failed"
    shown = epochal(service, tmp_path, "datasets", "show", dataset_id)
    assert "failed" in shown.stdout and "short.csv, record 2" in shown.stdout


def test_a_path_outside_the_roots_is_refused(service: Service, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.csv"
    outside.write_text("a,label\n1,0\n")
    added = epochal(service, tmp_path, "datasets", "add", str(outside))
    said = " ".join(added.stderr.split())  # the console wraps long lines
    assert added.returncode == 1 and "not under an allowed data root" in said
