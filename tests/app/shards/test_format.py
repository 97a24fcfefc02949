"""Shards and their index through a real store (a directory and SeaweedFS): written, indexed,
read back by global id, and every kind of damage found and named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.shards.cache import ChecksumMismatch
from app.shards.index import (
    INDEX,
    IndexMissing,
    ShardIndex,
    content_hash,
    read_index,
    shard_key,
)
from app.shards.layout import Schema, ShardError, header, records
from app.shards.reader import ShardReader
from app.shards.writer import ShardWriter, write_shards
from app.storage.base import Store
from app.storage.directory import DirectoryStore
from tests.shard_data import CountingStore, write_dataset


def test_write_index_and_read_back_by_global_id(store: Store) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(500, 6, 5, 3), dtype=np.uint8)
    y = rng.integers(0, 3, size=500)
    schema = Schema.of((6, 5, 3), np.uint8, "class")
    names = ["cat", "dog", "eel"]
    with ShardWriter(store, "datasets/d1", schema, shard_bytes=10_000, class_names=names) as w:
        for at in range(0, 500, 37):  # batches that straddle shard boundaries
            w.add_batch(x[at : at + 37], y[at : at + 37])
    index = w.index
    assert index is not None
    record = 6 * 5 * 3 + 8
    assert schema.record_bytes == record
    assert all(s.size <= 10_000 for s in index.shards)
    assert index.rows_per_shard == [(10_000 - 128) // record] * 5  # a 128-byte header
    assert index.rows == 500 and sum(index.rows_per_shard) == 500
    assert (index.classes, index.class_names) == (3, tuple(names))
    # The index in the store is the one the writer returned, its version a content hash.
    again = read_index(store, "datasets/d1")
    assert again == index and again.version == index.version and len(index.version) == 64
    body = json.loads(store.get("datasets/d1/index.json"))
    assert body["rows"] == 500 and body["bytes"] == sum(s.size for s in index.shards)
    assert body["schema"] == {"x_shape": [6, 5, 3], "x_dtype": "|u1", "y_kind": "class"}
    assert [s["sha256"] for s in body["shards"]] == [s.sha256 for s in index.shards]
    with ShardReader(store, "datasets/d1", cache_bytes=3 * 10_000) as reader:
        assert len(reader) == 500
        for i in (0, 99, 100, 250, 499):
            xi, yi = reader.read(i)
            assert np.array_equal(xi, x[i]) and yi == y[i]
        xs, ys = reader.read_range(90, 300)  # across three shards
        assert np.array_equal(xs, x[90:300]) and np.array_equal(ys, y[90:300])
        ids = rng.permutation(500)[:120]
        xs, ys = reader.take(ids)
        assert np.array_equal(xs, x[ids]) and np.array_equal(ys, y[ids])
        with pytest.raises(IndexError):
            reader.read(500)
        assert reader.stats.peak_bytes <= 3 * 10_000


def test_a_shard_is_a_plain_npy_file_numpy_maps_without_pickle(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    data = write_dataset(store, "d", [10, 7], x_shape=(2, 3), dtype=np.int16)
    for n, entry in enumerate(data.index.shards):
        path = tmp_path / "d" / entry.name
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
        assert mapped.shape == (entry.rows,) and mapped.dtype.names == ("x", "y")
        assert mapped.offset == entry.offset  # type: ignore[attr-defined]
        start = int(data.index.starts[n])
        assert np.array_equal(mapped["x"], data.x[start : start + entry.rows])
        assert np.array_equal(mapped["y"], data.y[start : start + entry.rows])
        # Record i lies at offset + i * record_bytes: one ranged read for a run of rows.
        raw = path.read_bytes()
        size = data.index.schema.record_bytes
        one = np.frombuffer(raw[entry.offset + 3 * size : entry.offset + 4 * size], mapped.dtype)
        assert np.array_equal(one["x"][0], data.x[start + 3])


def test_every_shard_header_of_a_writer_has_one_length() -> None:
    schema = Schema.of((28, 28), np.uint8, "class")
    lengths = {len(header(schema, rows, 99_999)) for rows in (0, 1, 10, 12345, 99_999)}
    assert len(lengths) == 1 and lengths.pop() % 64 == 0
    with pytest.raises(ValueError):
        header(schema, 100_000, 99_999)


def test_targets_and_samples_given_one_by_one(store: Store) -> None:
    samples = [(np.full((3,), i, dtype=np.float64), i / 10) for i in range(25)]
    schema = Schema.of((3,), np.float32, "target")
    index = write_shards(store, "t/reg", schema, iter(samples), shard_bytes=256)
    assert index.classes is None and index.rows == 25 and len(index.shards) > 1
    with ShardReader(store, "t/reg", index=index, cache_bytes=index.max_shard_bytes) as reader:
        x, y = reader.read_range(0, 25)
    assert x.dtype == np.float32 and y.dtype == np.float32
    assert np.allclose(x[:, 0], np.arange(25)) and np.allclose(y, np.arange(25) / 10)


def test_a_changed_shard_is_found_and_named(store: Store) -> None:
    data = write_dataset(store, "c/d", [20, 20, 20])
    victim = data.index.shards[1]
    key = shard_key("c/d", victim.name)
    original = store.get(key)
    raw = bytearray(original)
    raw[-1] ^= 0xFF  # one bit of the last record
    store.put(key, bytes(raw))
    with ShardReader(store, "c/d", cache_bytes=10 * victim.size) as reader:
        x, _ = reader.read_range(0, 20)  # shard 0 is sound
        assert np.array_equal(x, data.x[:20])
        with pytest.raises(ChecksumMismatch, match=victim.name) as caught:
            reader.read(25)
        assert caught.value.shard == victim.name
        # Not cached as good: the next read checks again.
        with pytest.raises(ChecksumMismatch, match=victim.name):
            reader.read(39)
        store.put(key, bytes(raw[:-5]))  # truncated
        with pytest.raises(ChecksumMismatch, match=f"{victim.name}: {victim.size - 5} bytes"):
            reader.read(30)
        store.delete(key)
        with pytest.raises(ShardError, match=f"{victim.name} is missing"):
            reader.read(30)
        assert np.array_equal(reader.read(59)[0], data.x[59])  # the others still read
        store.put(key, original)  # repaired: read again from the store, and good
        assert np.array_equal(reader.read(30)[0], data.x[30])


def test_an_edited_or_unfinished_index_is_refused(store: Store) -> None:
    with pytest.raises(IndexMissing):
        read_index(store, "nothing/here")
    data = write_dataset(store, "e/d", [5, 5])
    body = json.loads(store.get("e/d/index.json"))
    edits = {
        "rows": lambda b: b.update(rows=11),
        "shard rows": lambda b: b["shards"][0].update(rows=6),
        "sha256": lambda b: b["shards"][1].update(sha256="0" * 64),
        "schema": lambda b: b["schema"].update(x_dtype="<f8"),
        "classes": lambda b: b.update(classes=None),
        "format": lambda b: b.update(format_version=99),
        "name": lambda b: b["shards"][0].update(name="../../etc/passwd"),
    }
    for what, edit in edits.items():
        changed = json.loads(json.dumps(body))
        edit(changed)
        with pytest.raises(ShardError):
            ShardIndex.from_json(json.dumps(changed).encode())
        # With its version recomputed, numbers that disagree are still refused.
        if what != "sha256":
            changed["version"] = content_hash({k: v for k, v in changed.items() if k != "version"})
            with pytest.raises(ShardError):
                ShardIndex.from_json(json.dumps(changed).encode())
    assert ShardIndex.from_json(json.dumps(body).encode()) == data.index
    with pytest.raises(ShardError):
        ShardIndex.from_json(b"[1, 2]")
    with pytest.raises(ShardError):
        ShardIndex.from_json(b"not json")


def test_a_written_data_set_is_immutable(store: Store) -> None:
    write_dataset(store, "i/d", [4])
    with pytest.raises(ShardError, match="immutable"):
        ShardWriter(store, "i/d", Schema.of((4, 3), np.float32, "class"))


def test_a_failed_write_leaves_nothing_and_names_the_record(store: Store) -> None:
    schema = Schema.of((2,), np.float32, "class")
    good = np.ones((30, 2), dtype=np.float32)
    cases = [
        (np.ones((5, 3)), np.zeros(5), "record 30: samples of shape \\(3,\\)"),
        (np.array([[1.0, 2.0], [np.nan, 1.0]]), np.zeros(2), "record 31: x is not finite"),
        (np.ones((3, 2)), np.array([0, 1, -1]), "record 32: the label is not"),
        (np.ones((3, 2)), np.array([0, 1.5, 1]), "record 31: the label is not"),
        (np.ones((3, 2)), np.array([0, 1, 7]), "record 32: the label is not a class 0 .. 4"),
        (np.full((2, 2), 1e300), np.zeros(2), "record 30: x does not fit"),
    ]
    for n, (bad_x, bad_y, message) in enumerate(cases):
        prefix = f"f/{n}"
        with pytest.raises(ShardError, match=message):
            with ShardWriter(store, prefix, schema, shard_bytes=200, classes=5) as w:
                w.add_batch(good, np.zeros(30))  # several shards stored already
                w.add_batch(bad_x, bad_y)
        assert list(store.list_objects(prefix + "/")) == []
    # A writer that dies between shards and index (no abort) leaves no index: not a data set,
    # and the next writer of the prefix starts clean.
    w = ShardWriter(store, "f/dead", schema, shard_bytes=200)
    w.add_batch(good, np.zeros(30))
    w.cut()
    assert list(store.list_objects("f/dead/")) and not any(
        i.key.endswith(INDEX) for i in store.list_objects("f/dead/")
    )
    with pytest.raises(IndexMissing):
        read_index(store, "f/dead")
    index = write_shards(store, "f/dead", schema, [(np.zeros(2), 1)])
    assert [i.key for i in store.list_objects("f/dead/")] == [
        "f/dead/index.json",
        f"f/dead/{index.shards[0].name}",
    ]


def test_no_samples_no_data_set(store: Store) -> None:
    with pytest.raises(ShardError, match="no samples"):
        write_shards(store, "n/d", Schema.of((2,), np.float32, "target"), [])
    assert list(store.list_objects("n/")) == []


def test_the_version_is_a_content_hash(tmp_path: Path) -> None:
    a = write_dataset(DirectoryStore(tmp_path / "a"), "d", [8, 8], seed=3).index
    b = write_dataset(DirectoryStore(tmp_path / "b"), "other", [8, 8], seed=3).index
    c = write_dataset(DirectoryStore(tmp_path / "c"), "d", [8, 8], seed=4).index
    assert a.version == b.version != c.version


def test_schemas_refuse_what_a_shard_cannot_hold() -> None:
    for shape, dtype in (((0,), np.float32), ((2,), np.complex64), ((2,), np.object_)):
        with pytest.raises(ShardError):
            Schema.of(shape, dtype, "class")
    with pytest.raises(ShardError):
        Schema.of((2,), np.float32, "label")  # type: ignore[arg-type]
    big_endian = Schema.of((2,), ">f4", "target")
    assert big_endian.x_dtype == "<f4"
    buf = header(big_endian, 0, 0)
    assert len(records(buf, big_endian)) == 0
    with pytest.raises(ShardError, match="not records"):
        records(header(Schema.of((3,), "<f4", "target"), 0, 0), big_endian)


def test_reading_a_range_fetches_each_shard_once(store: Store) -> None:
    data = write_dataset(store, "r/d", [10, 10, 10, 10])
    counting = CountingStore(store)
    with ShardReader(counting, "r/d", cache_bytes=2 * data.index.max_shard_bytes) as reader:  # type: ignore[arg-type]
        x, _ = reader.read_range(5, 25)
        assert np.array_equal(x, data.x[5:25])
        assert counting.shards_read() == {s.name for s in data.index.shards[:3]}
        assert (
            reader.stats.fetches == 3 and reader.stats.peak_bytes <= 2 * data.index.max_shard_bytes
        )
