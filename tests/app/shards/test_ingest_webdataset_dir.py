"""A directory of WebDataset tar shards packed in one tar (as `epochal datasets upload DIR`
sends it) ingests to what the directory itself ingests to: the same rows, classes, version and
records, each shard streamed from the outer tar; and an error names the outer tar, the shard
and the sample."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

from app.shards.ingest import IngestError, ingest_file, webdataset
from app.storage.directory import DirectoryStore
from epochal_client.packed import pack
from tests.app.shards.test_ingest import assert_no_data_set, read_back
from tests.shard_data import image_bytes, npy_bytes, write_webdataset

RNG = np.random.default_rng(13)


def _shards(root: Path, parts: list[list[dict[str, bytes]]]) -> Path:
    """shard-000.tar, shard-001.tar, ...: the samples of each part, keyed 00000, 00001, ...
    across the shards."""
    root.mkdir(parents=True)
    n = 0
    for number, samples in enumerate(parts):
        keyed = [(f"{n + i:05d}", sample) for i, sample in enumerate(samples)]
        write_webdataset(root / f"shard-{number:03d}.tar", keyed)
        n += len(samples)
    return root


def _arrays(count: int) -> list[dict[str, bytes]]:
    return [
        {"npy": npy_bytes(RNG.normal(size=(4, 3)).astype(np.float32)), "cls": str(n % 3).encode()}
        for n in range(count)
    ]


def test_a_packed_directory_of_shards_ingests_to_the_directorys_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path / "store")
    root = _shards(tmp_path / "stack", [_arrays(5), _arrays(4), _arrays(6)])
    (root / "README.md").write_text("not a shard: skipped, as in the directory")
    tar = pack(root, tmp_path / "upload" / "stack.tar")
    # Each shard is larger than a sample may be: streamed from the outer tar, never held whole.
    monkeypatch.setattr(webdataset, "MAX_MEMBER_BYTES", 1024)
    assert min(p.stat().st_size for p in root.glob("*.tar")) > 1024
    folder = ingest_file(store, "folder", root, "classification", shard_bytes=256)
    packed = ingest_file(store, "tar", tar, "classification", shard_bytes=256)
    assert packed.rows == folder.rows == 15 and len(packed.shards) > 1
    assert packed.classes == folder.classes == 3 and packed.schema.x_shape == (4, 3)
    assert packed.version == folder.version
    (x, y), (tx, ty) = read_back(store, "folder"), read_back(store, "tar")
    assert np.array_equal(x, tx) and np.array_equal(y, ty)
    assert y.tolist() == [n % 3 for n in (*range(5), *range(4), *range(6))]  # shard by shard
    by_hand = tmp_path / "by-hand.tar"
    with tarfile.open(by_hand, "w") as archive:  # the shards out of order, in a folder
        for shard in sorted(root.glob("*.tar"), reverse=True):
            archive.add(shard, arcname=f"stack/{shard.name}")
    again = ingest_file(store, "by-hand", by_hand, "classification", shard_bytes=256)
    assert again.version == folder.version


def test_a_bad_sample_in_a_shard_is_named_by_the_outer_tar_the_shard_and_its_key(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path / "store")
    good = image_bytes(RNG.integers(0, 256, (6, 6, 3), dtype=np.uint8))
    samples = [{"png": good, "cls": b"0"} for _ in range(4)]
    cases = [
        ({"png": good[:30], "cls": b"1"}, "stack.tar/shard-001.tar/00005.png, record 5: not a"),
        ({"png": good}, "stack.tar/shard-001.tar/00005, record 5: a sample needs"),
        ({"png": good, "cls": b"one"}, "stack.tar/shard-001.tar/00005.cls, record 5: the class"),
    ]
    for n, (bad, message) in enumerate(cases):
        root = _shards(tmp_path / f"stack-{n}", [samples, [samples[0], bad, samples[1]]])
        tar = pack(root, tmp_path / f"upload-{n}" / "stack.tar")
        with pytest.raises(IngestError, match=f"^{message}"):
            ingest_file(store, f"bad/{n}", tar, "classification")
        assert_no_data_set(store, f"bad/{n}")


def test_a_shard_that_is_not_a_tar_is_named(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    root = _shards(tmp_path / "stack", [_arrays(3)])
    (root / "shard-001.tar").write_bytes(b"not a tar file" * 100)
    tar = pack(root, tmp_path / "upload" / "stack.tar")
    with pytest.raises(IngestError, match="^stack.tar/shard-001.tar: not a readable tar file"):
        ingest_file(store, "x", tar, "classification")
    assert_no_data_set(store, "x")
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w"):
        pass
    with pytest.raises(IngestError, match="^empty.tar: no samples in the tar"):
        ingest_file(store, "y", empty, "classification")
