"""An uploaded .npz, .npy or CSV into shards and an index through a real store: every record
read once and checked, a bad one named with its file, and never a half-ready data set."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from app.shards import ingest
from app.shards.index import IndexMissing, read_index
from app.shards.ingest import IngestError, ingest_file
from app.shards.reader import ShardReader
from app.storage.base import Store
from app.storage.directory import DirectoryStore


def read_back(store: Store, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    index = read_index(store, prefix)
    with ShardReader(store, prefix, index=index, cache_bytes=index.max_shard_bytes) as reader:
        return reader.read_range(0, index.rows)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_an_npz_becomes_shards(store: Store, tmp_path: Path, save: object) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (300, 8, 8), dtype=np.uint8)
    y = rng.integers(0, 4, 300)
    xt, yt = x[:50] // 2, y[:50]
    path = tmp_path / "images.npz"
    save(path, x=x, y=y, x_test=xt, y_test=yt)  # type: ignore[operator]
    index = ingest_file(store, "d/train", path, "classification", shard_bytes=4096)
    assert len(index.shards) > 1 and index.rows == 300 and index.classes == 4
    assert index.schema.x_dtype == "|u1" and index.schema.x_shape == (8, 8)
    got_x, got_y = read_back(store, "d/train")
    assert np.array_equal(got_x, x) and np.array_equal(got_y, y)
    ingest_file(store, "d/test", path, "classification", arrays=("x_test", "y_test"))
    got_x, got_y = read_back(store, "d/test")
    assert np.array_equal(got_x, xt) and np.array_equal(got_y, yt)


def test_a_structured_npy_is_memory_mapped_into_shards(store: Store, tmp_path: Path) -> None:
    records = np.zeros(120, dtype=[("x", "<f8", (3,)), ("y", "<f4")])
    records["x"] = np.arange(360).reshape(120, 3) / 7
    records["y"] = np.arange(120) / 3
    np.save(tmp_path / "table.npy", records)
    index = ingest_file(store, "n/d", tmp_path / "table.npy", "regression", shard_bytes=1024)
    assert index.classes is None and index.schema.x_dtype == "<f8" and len(index.shards) > 1
    got_x, got_y = read_back(store, "n/d")
    assert np.array_equal(got_x, records["x"]) and np.allclose(got_y, records["y"])


def test_a_csv_becomes_shards_with_its_label_column(store: Store, tmp_path: Path) -> None:
    lines = ["rooms,price,area", *(f"{r % 5},{100 + 3 * r},{50 + r / 4}" for r in range(200))]
    path = tmp_path / "houses.csv"
    path.write_text("\n".join(lines) + "\n\n")
    index = ingest_file(store, "c/d", path, "regression", label_column="price", shard_bytes=512)
    assert index.rows == 200 and index.schema.x_shape == (2,) and len(index.shards) > 1
    got_x, got_y = read_back(store, "c/d")
    r = np.arange(200)
    assert np.allclose(got_x, np.stack([r % 5, 50 + r / 4], axis=1))
    assert np.allclose(got_y, 100 + 3 * r)


def assert_no_data_set(store: Store, prefix: str) -> None:
    with pytest.raises(IndexMissing):
        read_index(store, prefix)
    assert list(store.list_objects(prefix + "/")) == []


def test_a_csv_row_with_the_wrong_number_of_columns_fails_naming_file_and_record(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "CHUNK_ROWS_BYTES", 64)  # shards are stored before the bad row
    rows = [f"{i},{i % 3}" for i in range(500)]
    rows[437] = "437,1,9"
    path = tmp_path / "points.csv"
    path.write_text("value,label\n" + "\n".join(rows) + "\n")
    with pytest.raises(IngestError) as caught:
        ingest_file(store, "bad/d", path, "classification", shard_bytes=256)
    assert str(caught.value) == ("points.csv, record 437: line 439 has 3 columns; the header has 2")
    assert (caught.value.file, caught.value.record) == ("points.csv", 437)
    assert_no_data_set(store, "bad/d")


def test_bad_records_are_named_and_leave_no_data_set(store: Store, tmp_path: Path) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("a,b,label\n1,2,0\n3,x4,1\n")
    x = np.ones((40, 2), dtype=np.float32)
    x[33, 1] = np.nan
    np.savez(tmp_path / "nan.npz", x=x, y=np.zeros(40, dtype=np.int64))
    np.savez(tmp_path / "short.npz", x=x, y=np.zeros(39))
    np.savez(tmp_path / "labels.npz", x=np.ones((5, 2)), y=np.array([0, 1, 2, -3, 1]))
    cases = [
        (csv_path, "classification", "t.csv, record 1: line 3, column 'b': 'x4' is not a number"),
        (tmp_path / "nan.npz", "classification", "nan.npz, record 33: x is not finite"),
        (tmp_path / "short.npz", "regression", "short.npz: y has shape \\(39,\\)"),
        (tmp_path / "labels.npz", "classification", "labels.npz, record 3: the label is not"),
    ]
    for n, (path, task, message) in enumerate(cases):
        with pytest.raises(IngestError, match=message):
            ingest_file(store, f"b/{n}", path, task, shard_bytes=128)  # type: ignore[arg-type]
        assert_no_data_set(store, f"b/{n}")
    (tmp_path / "d.h5").write_bytes(b"HDF")
    with pytest.raises(IngestError, match="d.h5: not a .csv, .npy, .npz, .parquet or .tar file"):
        ingest_file(store, "b/p", tmp_path / "d.h5", "classification")


def test_an_npz_is_read_a_chunk_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "CHUNK_ROWS_BYTES", 256 * 1024)
    x = np.random.default_rng(1).integers(0, 256, (4000, 64, 64), dtype=np.uint8)  # 16 MiB
    np.savez_compressed(tmp_path / "big.npz", x=x, y=np.arange(4000) % 10)
    del x
    store = DirectoryStore(tmp_path / "store")
    tracemalloc.start()
    try:
        index = ingest_file(
            store, "big", tmp_path / "big.npz", "classification", shard_bytes=1024 * 1024
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert index.rows == 4000 and len(index.shards) == 16  # 255 records of 4104 bytes each
    assert peak < 4 * 1024 * 1024, peak  # the file's arrays hold 16 MiB
