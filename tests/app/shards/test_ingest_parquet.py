"""Parquet into shards through a real store: number and fixed-size-list columns, several row
groups and files read in batches, and a null or a column of text named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.shards import ingest
from app.shards.ingest import IngestError, ingest_file
from app.storage.base import Store
from app.storage.directory import DirectoryStore
from tests.app.shards.test_ingest import assert_no_data_set, read_back


def test_number_columns_side_by_side_from_many_row_groups(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "CHUNK_ROWS_BYTES", 64)  # batches of a few rows
    r = np.arange(100)
    table = pa.table({"price": (100 + 3 * r).astype(np.int32), "rooms": r % 5, "area": 50 + r / 4})
    path = tmp_path / "houses.parquet"
    pq.write_table(table, path, row_group_size=30)
    index = ingest_file(store, "p/d", path, "regression", label_column="price", shard_bytes=256)
    assert index.rows == 100 and index.schema.x_shape == (2,) and index.schema.x_dtype == "<f4"
    assert len(index.shards) > 1
    x, y = read_back(store, "p/d")
    assert np.allclose(x, np.stack([r % 5, 50 + r / 4], axis=1)) and np.allclose(y, 100 + 3 * r)


def test_a_fixed_size_list_column_keeps_its_shape_and_dtype(store: Store, tmp_path: Path) -> None:
    images = np.random.default_rng(0).integers(0, 256, (40, 4, 3), dtype=np.uint8)
    rows = pa.array(list(images.reshape(40, 12)), type=pa.list_(pa.uint8(), 12))
    nested = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(pa.array(images.reshape(-1)), 3), 4
    )
    labels = pa.array(np.arange(40) % 4)
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(pa.table({"pixels": nested[:25], "label": labels[:25]}), folder / "0.parquet")
    pq.write_table(pa.table({"pixels": nested[25:], "label": labels[25:]}), folder / "1.parquet")
    index = ingest_file(store, "l/d", folder, "classification")  # a directory of parts
    assert index.schema.x_shape == (4, 3) and index.schema.x_dtype == "|u1"
    assert index.rows == 40 and index.classes == 4
    x, y = read_back(store, "l/d")
    assert np.array_equal(x, images) and y.tolist() == (np.arange(40) % 4).tolist()
    pq.write_table(pa.table({"flat": rows, "label": labels}), tmp_path / "flat.parquet")
    index = ingest_file(store, "l/flat", tmp_path / "flat.parquet", "classification")
    assert index.schema.x_shape == (12,)


def test_nulls_and_text_are_named(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    x = pa.array([1.0, 2.0, None, 4.0] * 10)
    pq.write_table(pa.table({"x": x, "y": np.arange(40)}), tmp_path / "n.parquet", row_group_size=8)
    lists = pa.array([[1, 2]] * 9 + [[1, None]], type=pa.list_(pa.int64(), 2))
    pq.write_table(pa.table({"v": lists, "y": np.zeros(10)}), tmp_path / "l.parquet")
    pq.write_table(pa.table({"name": ["a", "b"], "y": [0, 1]}), tmp_path / "t.parquet")
    pq.write_table(pa.table({"x": [1.0], "y": [0]}), tmp_path / "other.parquet")
    cases = [
        ("n.parquet", "n.parquet, record 2: column 'x' is null"),
        ("l.parquet", "l.parquet, record 9: column 'v' is null"),
        ("t.parquet", "t.parquet: column 'name' is string: numbers or fixed-size lists only"),
    ]
    for name, message in cases:
        with pytest.raises(IngestError, match=message):
            ingest_file(store, f"bad/{name}", tmp_path / name, "regression")
        assert_no_data_set(store, f"bad/{name}")
    with pytest.raises(IngestError, match="no column 'price'"):
        ingest_file(store, "bad/c", tmp_path / "other.parquet", "regression", label_column="price")
    (tmp_path / "junk.parquet").write_bytes(b"PAR1")
    with pytest.raises(IngestError, match="junk.parquet: not a readable Parquet file"):
        ingest_file(store, "bad/j", tmp_path / "junk.parquet", "regression")


def test_the_format_is_sniffed_or_named(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    pq.write_table(pa.table({"x": [1.0, 2.0], "y": [0, 1]}), tmp_path / "table.bin")
    index = ingest_file(store, "named", tmp_path / "table.bin", "classification", format="parquet")
    assert index.rows == 2
    with pytest.raises(IngestError, match="table.bin: unknown format 'feather': one of csv, "):
        ingest_file(store, "f", tmp_path / "table.bin", "classification", format="feather")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IngestError, match="empty: a directory of no class folders"):
        ingest_file(store, "e", tmp_path / "empty", "classification")


INGEST_AND_MEASURE = """
import sys
from pathlib import Path

import pyarrow as pa

from app.shards import ingest
from app.storage.directory import DirectoryStore

ingest.CHUNK_ROWS_BYTES = 256 * 1024
path = Path(sys.argv[1])
index = ingest.ingest_file(
    DirectoryStore(path.parent / "store"), "big", path, "classification", shard_bytes=1 << 20
)
print(index.rows, pa.default_memory_pool().max_memory())
"""


def test_a_parquet_file_is_read_a_row_group_at_a_time(tmp_path: Path) -> None:
    rows, width = 8000, 4096  # 32 MiB of pixels in row groups of 400 KiB
    schema = pa.schema([("x", pa.list_(pa.uint8(), width)), ("y", pa.int64())])
    rng = np.random.default_rng(1)
    with pq.ParquetWriter(tmp_path / "big.parquet", schema, compression="none") as writer:
        for at in range(0, rows, 100):
            pixels = rng.integers(0, 256, 100 * width, dtype=np.uint8)
            x = pa.FixedSizeListArray.from_arrays(pa.array(pixels), width)
            writer.write_table(pa.table({"x": x, "y": np.arange(at, at + 100) % 10}))
    argv = [sys.executable, "-c", INGEST_AND_MEASURE, str(tmp_path / "big.parquet")]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    ingested, arrow_peak = map(int, done.stdout.split())
    assert ingested == rows
    assert arrow_peak < 8 * 1024 * 1024, arrow_peak  # the file holds 32 MiB
