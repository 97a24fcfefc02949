"""Uploads are bounded by what they cost once stored: the .npy headers are read before anything
is converted (the 970 KB reproduction never expands), CSV counts too, a key has a storage quota,
and size_bytes is what is stored."""

from __future__ import annotations

import io
import resource
import zipfile
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from tests.app.api.test_datasets import images, npz, stored_files, upload
from tests.conftest import make_key


@pytest.fixture
def app_client(sqlite_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('uploader')}"
        yield client


def compressed_zeros(rows: int, columns: int) -> bytes:
    """np.savez_compressed(x=np.zeros((rows, columns), np.int8), y=[0…, 1]) without ever
    holding x in this process: the .npy header, then zeros streamed through deflate."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as f:
            header = {"descr": "|i1", "fortran_order": False, "shape": (rows, columns)}
            np.lib.format.write_array_header_1_0(f, header)
            block = bytes(columns * 1000)
            for _ in range(rows // 1000):
                f.write(block)
        y = np.zeros(rows, np.int64)
        y[0] = 1
        with archive.open("y.npy", "w") as f:
            np.lib.format.write_array(f, y)
    return buf.getvalue()


def test_the_970kb_npz_is_refused_before_it_is_converted(app_client: TestClient) -> None:
    content = compressed_zeros(990_000, 1000)  # 990 MB of int8 zeros, < 5 MB sent
    assert len(content) < 5_000_000
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    response = upload(app_client, content)
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert f"take {990_000 * 1000 * 4 + 990_000 * 8} bytes once stored" in detail
    assert "EPOCHAL_MAX_UPLOAD_ARRAY_BYTES" in detail
    assert peak_after - peak_before < 200 * 2**20  # nothing was loaded or converted
    assert stored_files() == []


def test_csv_counts_against_the_array_limit_before_parsing(
    sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.main import create_app

    monkeypatch.setenv("EPOCHAL_MAX_UPLOAD_ARRAY_BYTES", "4096")
    get_settings.cache_clear()
    rows = b"".join(b"1,2,3,%d\n" % (i % 2) for i in range(400))  # 400 x 4 float32 > 4096
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('csv')}"
        small = upload(client, b"a,b,c,y\n" + rows[:80], "s.csv", label_column="y")
        assert small.status_code == 201, small.text
        assert small.json()["size_bytes"] == stored_files()[0].stat().st_size
        big = upload(client, b"a,b,c,y\n" + rows, "b.csv", label_column="y")
    assert big.status_code == 413 and "EPOCHAL_MAX_UPLOAD_ARRAY_BYTES" in big.text


def test_a_keys_storage_quota_is_507_naming_the_setting(
    sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.main import create_app

    content = npz(**images())
    monkeypatch.setenv("EPOCHAL_MAX_STORAGE_BYTES_PER_KEY", str(len(content) * 3 // 2))
    get_settings.cache_clear()
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        alice = {"Authorization": f"Bearer {make_key('alice')}"}
        bob = {"Authorization": f"Bearer {make_key('bob')}"}
        files = {"file": ("d.npz", content)}
        first = client.post("/v1/datasets", files=files, headers=alice)
        assert first.status_code == 201, first.text
        second = client.post("/v1/datasets", files=files, headers=alice)
        assert second.status_code == 507, second.text
        assert "EPOCHAL_MAX_STORAGE_BYTES_PER_KEY" in second.json()["detail"]
        assert client.post("/v1/datasets", files=files, headers=bob).status_code == 201
        client.delete(f"/v1/datasets/{first.json()['id']}", headers=alice)
        assert client.post("/v1/datasets", files=files, headers=alice).status_code == 201
