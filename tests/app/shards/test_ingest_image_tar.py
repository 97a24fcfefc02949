"""An image folder packed in a tar file (as `epochal datasets upload DIR` sends it) ingests to
what the folder itself ingests to: the same rows, classes, version and records, and the same
errors, read from the tar without extracting it."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

from app.shards.ingest import IngestError, ingest_file
from app.storage.directory import DirectoryStore
from epochal_client.packed import pack
from tests.app.shards.test_ingest import assert_no_data_set, read_back
from tests.shard_data import image_bytes, write_image_folder

RNG = np.random.default_rng(11)


def _folder(root: Path) -> Path:
    images = {
        name: [image_bytes(RNG.integers(0, 256, (6, 6, 3), dtype=np.uint8)) for _ in range(7)]
        for name in ("ant", "bee", "cow")
    }
    root = write_image_folder(root, images)
    (root / "empty").mkdir()  # a class without a file: a class all the same
    (root / "bee" / "notes.txt").write_text("not an image: skipped")
    return root


def test_the_tar_of_a_folder_ingests_to_the_folders_index_and_records(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    root = _folder(tmp_path / "zoo")
    tar = pack(root, tmp_path / "upload" / "zoo.tar")
    folder = ingest_file(store, "folder", root, "classification", shard_bytes=256)
    packed = ingest_file(
        store, "tar", tar, "classification", format="image_folder", shard_bytes=256
    )
    assert packed.rows == folder.rows == 21 and len(packed.shards) > 1
    assert packed.class_names == folder.class_names == ("ant", "bee", "cow", "empty")
    assert packed.version == folder.version
    (x, y), (tx, ty) = read_back(store, "folder"), read_back(store, "tar")
    assert np.array_equal(x, tx) and np.array_equal(y, ty)


def test_a_tar_wrapping_the_folder_in_one_folder_is_the_folder(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    root = _folder(tmp_path / "zoo")
    tar = tmp_path / "anything.tar"
    with tarfile.open(tar, "w") as archive:
        archive.add(root, arcname="zoo")  # as `tar cf anything.tar zoo`
    folder = ingest_file(store, "folder", root, "classification")
    packed = ingest_file(store, "tar", tar, "classification", format="image_folder")
    assert (packed.version, packed.class_names) == (folder.version, folder.class_names)


def test_a_bad_image_in_the_tar_is_named_as_in_the_folder(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    good = image_bytes(RNG.integers(0, 256, (16, 16, 3), dtype=np.uint8), "JPEG")
    images = {"a": [good, good], "b": [good, good[: len(good) // 2], good]}
    root = write_image_folder(tmp_path / "photos", images, ".jpg")
    with pytest.raises(IngestError) as in_folder:
        ingest_file(store, "folder", root, "classification")
    tar = pack(root, tmp_path / "photos.tar")
    with pytest.raises(IngestError) as in_tar:
        ingest_file(store, "tar", tar, "classification", format="image_folder")
    assert in_tar.value.file == in_folder.value.file == "photos/b/001.jpg"
    assert in_tar.value.record == in_folder.value.record
    assert_no_data_set(store, "tar")


def test_a_file_outside_the_class_folders_is_named(tmp_path: Path) -> None:
    root = _folder(tmp_path / "zoo")
    (root / "README.txt").write_text("a stray file")
    tar = pack(root, tmp_path / "zoo.tar")
    store = DirectoryStore(tmp_path / "store")
    with pytest.raises(IngestError, match="^README.txt: a file outside the class folders"):
        ingest_file(store, "tar", tar, "classification", format="image_folder")
    (tmp_path / "plain.tar").write_bytes(b"not a tar file" * 100)
    with pytest.raises(IngestError, match="^plain.tar: neither a directory of class folders"):
        ingest_file(store, "x", tmp_path / "plain.tar", "classification", format="image_folder")
    assert_no_data_set(store, "tar")
