"""Data sets registered by reference: a file under an allowed root is ingested like an upload;
so is a key under the S3 store's data prefix; anything outside the roots, a `..`, a symbolic
link leading out, or a store key outside the data prefix is a 422 naming the problem, and
nothing is registered. Shards past the key's quota fail the ingest; the ingest cuts shards of
EPOCHAL_INGEST_SHARD_BYTES."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from app.services.dataset_ingest import run_ingest
from app.shards.index import dataset_prefix, read_index
from app.storage import get_store
from tests.conftest import make_key
from tests.storage_server import BUCKET, SeaweedServer


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    """An allowed root holding a small .npz, and a folder beside it that is not allowed."""
    allowed, outside = tmp_path / "data", tmp_path / "private"
    allowed.mkdir()
    outside.mkdir()
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (30, 5), dtype=np.uint8), np.arange(30) % 2
    np.savez(allowed / "small.npz", x=x, y=y)
    np.savez(outside / "secret.npz", x=x, y=y)
    return allowed, outside


@pytest.fixture
def client(
    sqlite_env: dict[str, str], roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    from app.main import create_app

    monkeypatch.setenv("EPOCHAL_DATA_ROOTS", str(roots[0]))
    get_settings.cache_clear()
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('registrar')}"
        yield client


def register(client: TestClient, source: str) -> tuple[int, dict[str, str]]:
    response = client.post("/v1/datasets/references", json={"source": source})
    return response.status_code, response.json()


def test_a_file_under_an_allowed_root_is_ingested(
    client: TestClient, roots: tuple[Path, Path]
) -> None:
    code, body = register(client, str(roots[0] / "small.npz"))
    assert code == 201 and body["status"] == "ingesting"
    assert run_ingest(body["id"]) == "ready"
    shown = client.get(f"/v1/datasets/{body['id']}").json()
    assert (shown["status"], shown["rows"], shown["classes"]) == ("ready", 30, 2)
    assert (roots[0] / "small.npz").exists()  # a reference is read, never moved or deleted


def test_paths_outside_the_roots_are_refused_naming_why(
    client: TestClient, roots: tuple[Path, Path]
) -> None:
    allowed, outside = roots
    (allowed / "escape.npz").symlink_to(outside / "secret.npz")
    (allowed / "linked").mkdir()
    (allowed / "linked" / "inner.npz").symlink_to(outside / "secret.npz")
    cases = {
        str(outside / "secret.npz"): "not under an allowed data root",
        f"{allowed}/../private/secret.npz": "'..'",
        str(allowed / "escape.npz"): "symbolic link",
        str(allowed / "linked"): "holds a symbolic link",
        "small.npz": "not an absolute path",
        str(allowed / "missing.npz"): "does not exist",
        "s3://bucket/data/x.npz": "not S3",
        "http://example.invalid/x.npz": "a server path or s3://",
    }
    for source, why in cases.items():
        code, body = register(client, source)
        assert code == 422 and why in body["detail"], (source, body)
    assert client.get("/v1/datasets").json()["items"] == []


def test_no_roots_means_no_reference(
    client: TestClient, roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_DATA_ROOTS", "")
    get_settings.cache_clear()
    code, body = register(client, str(roots[0] / "small.npz"))
    assert code == 422 and "EPOCHAL_DATA_ROOTS" in body["detail"]


def test_the_ingest_cuts_shards_of_the_size_the_worker_is_set_to(
    client: TestClient, roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_INGEST_SHARD_BYTES", "4096")
    get_settings.cache_clear()
    x = np.random.default_rng(1).normal(size=(200, 16)).astype(np.float32)
    np.savez(roots[0] / "points.npz", x=x, y=np.arange(200) % 3)  # 72-byte records
    code, body = register(client, str(roots[0] / "points.npz"))
    assert code == 201 and run_ingest(body["id"]) == "ready"
    index = read_index(get_store(), dataset_prefix(body["id"], "train"))
    assert index.rows == 200 and len(index.shards) == 4 and index.max_shard_bytes <= 4096


def test_shards_over_the_quota_fail_the_ingest(
    client: TestClient, roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_MAX_STORAGE_BYTES_PER_KEY", "100")
    get_settings.cache_clear()
    code, body = register(client, str(roots[0] / "small.npz"))
    assert code == 201 and run_ingest(body["id"]) == "failed"
    shown = client.get(f"/v1/datasets/{body['id']}").json()
    assert "quota" in shown["error"] and shown["size_bytes"] == 0


def test_a_prefix_in_the_s3_store_under_its_data_prefix(
    sqlite_env: dict[str, str],
    seaweed: SeaweedServer,
    s3_env: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from app.main import create_app

    url = f"s3://{BUCKET}/t-{secrets.token_hex(4)}"
    monkeypatch.setenv("EPOCHAL_STORE_URL", url)
    monkeypatch.setenv("EPOCHAL_STORE_ENDPOINT", seaweed.endpoint)
    get_settings.cache_clear()
    rows = "".join(f"{i},{i * 2},{i % 3}\n" for i in range(30))
    get_store().put("data/tables/points.csv", f"a,b,label\n{rows}".encode())
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('registrar')}"
        code, body = register(client, f"{url}/data/tables/points.csv")
        assert code == 201, body
        assert run_ingest(body["id"]) == "ready"
        assert client.get(f"/v1/datasets/{body['id']}").json()["rows"] == 30
        assert get_store().head("data/tables/points.csv").size > 0  # left where it was
        for source, why in {
            f"{url}/{body['id']}/train/index.json": "not under",
            f"{url}/datasets/{body['id']}/train/index.json": "not under",
            f"{url}/data/../datasets/x": "not a clean key",
            "s3://other-bucket/data/x.csv": "not in the service's store",
        }.items():
            code, refused = register(client, source)
            assert code == 422 and why in refused["detail"], (source, refused)


def test_a_format_the_ingest_cannot_read_is_a_422_naming_the_formats(
    client: TestClient, roots: tuple[Path, Path]
) -> None:
    body = {"source": str(roots[0] / "small.npz"), "format": "nosuchformat"}
    response = client.post("/v1/datasets/references", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["errors"][0]
    assert error["field"] == "format", error
    assert "'nosuchformat' is not one of csv, image_folder, npy, npz, parquet" in error["msg"]
    assert client.get("/v1/datasets").json()["items"] == []  # nothing was registered
