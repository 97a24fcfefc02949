"""Image folders and WebDataset tar shards into shards through a real store: JPEG and PNG of
any size made records of one size, classes from the folders, and a bad image named with its
file and record, leaving no data set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.shards.ingest import IngestError, ingest_file
from app.storage.base import Store
from tests.app.shards.test_ingest import assert_no_data_set, read_back
from tests.shard_data import (
    image_bytes,
    npy_bytes,
    write_image_folder,
    write_webdataset,
)

RNG = np.random.default_rng(7)


def stripes(height: int, width: int, edge: int) -> np.ndarray:
    """RGB: red in the first `edge` columns, blue in the last `edge`, green between."""
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[:, :edge, 0] = 255
    pixels[:, edge : width - edge, 1] = 255
    pixels[:, width - edge :, 2] = 255
    return pixels


def test_an_image_folder_becomes_records_of_the_first_images_size(
    store: Store, tmp_path: Path
) -> None:
    cats = [RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(3)]
    wide = stripes(8, 24, 8)  # same height: only cropped, to its green middle
    larger = stripes(16, 64, 16)  # halved to 8 x 32, then cropped inside the green
    root = write_image_folder(
        tmp_path / "pets",
        {"dog": [image_bytes(wide), image_bytes(larger)], "cat": [image_bytes(c) for c in cats]},
    )
    index = ingest_file(store, "pets/train", root, "classification", shard_bytes=512)
    assert index.class_names == ("cat", "dog") and index.classes == 2 and index.rows == 5
    assert index.schema.x_shape == (8, 8, 3) and index.schema.x_dtype == "|u1"
    assert len(index.shards) > 1
    x, y = read_back(store, "pets/train")
    assert sorted(y.tolist()) == [0, 0, 0, 1, 1] and y[0] == 0  # cat/ first: its first file's size
    stored_cats = {row.tobytes() for row in x[y == 0]}
    assert stored_cats == {c.tobytes() for c in cats}  # PNG is lossless
    green = np.zeros((8, 8, 3), dtype=np.uint8)
    green[..., 1] = 255
    assert all(np.array_equal(row, green) for row in x[y == 1])


def test_an_image_folders_records_mix_its_classes(store: Store, tmp_path: Path) -> None:
    """Stored in one fixed shuffle, not class by class: a job's validation split (the last
    records) and `limit` (the first) mix the classes, and the same folder stores the same."""
    images = {
        name: [image_bytes(RNG.integers(0, 256, (4, 4, 3), dtype=np.uint8)) for _ in range(10)]
        for name in "abcd"
    }
    root = write_image_folder(tmp_path / "four", images)
    ingest_file(store, "four/train", root, "classification")
    ingest_file(store, "again/train", root, "classification")
    (_, y), (_, again) = read_back(store, "four/train"), read_back(store, "again/train")
    assert len(set(y[:10].tolist())) > 2 and len(set(y[-10:].tolist())) > 2  # not one class
    assert y.tolist() != sorted(y.tolist())
    assert y.tolist() == again.tolist()


def test_image_size_and_grayscale_follow_the_options_or_the_first_image(tmp_path: Path) -> None:
    from app.storage.directory import DirectoryStore

    store = DirectoryStore(tmp_path / "store")
    grey = RNG.integers(0, 256, (6, 10), dtype=np.uint8)
    root = write_image_folder(
        tmp_path / "g", {"a": [image_bytes(grey)], "b": [image_bytes(stripes(6, 10, 2), "JPEG")]}
    )
    index = ingest_file(store, "g1", root, "classification")
    assert index.schema.x_shape == (6, 10, 1)  # the first image is grey: every record is
    x, _ = read_back(store, "g1")
    assert np.array_equal(x[0, ..., 0], grey)
    index = ingest_file(store, "g2", root, "classification", image_size=4, color="rgb")
    assert index.schema.x_shape == (4, 4, 3)
    x, _ = read_back(store, "g2")
    assert (x[0, ..., 0] == x[0, ..., 1]).all()  # grey made RGB: three equal channels
    with pytest.raises(IngestError, match="g: image_folder labels are classes"):
        ingest_file(store, "g3", root, "regression")


def test_a_corrupt_jpeg_fails_naming_its_file_and_record(store: Store, tmp_path: Path) -> None:
    good = image_bytes(RNG.integers(0, 256, (16, 16, 3), dtype=np.uint8), "JPEG")
    images = {"a": [good, good], "b": [good, good[: len(good) // 2], good]}
    root = write_image_folder(tmp_path / "photos", images, ".jpg")
    with pytest.raises(IngestError) as caught:
        ingest_file(store, "photos/train", root, "classification", shard_bytes=1024)
    assert caught.value.file == "photos/b/001.jpg"  # its record: its place in the stored shuffle
    record = caught.value.record
    assert isinstance(record, int) and 0 < record < 5
    assert "not a readable JPEG or PNG image" in str(caught.value)
    assert_no_data_set(store, "photos/train")
    (root / "b" / "001.jpg").write_bytes(b"not an image at all")
    with pytest.raises(IngestError, match=f"photos/b/001.jpg, record {record}: not a readable"):
        ingest_file(store, "photos/train", root, "classification")
    assert_no_data_set(store, "photos/train")


def test_a_webdataset_tar_becomes_records(store: Store, tmp_path: Path) -> None:
    pixels = [RNG.integers(0, 256, (5, 7), dtype=np.uint8) for _ in range(6)]
    samples = [
        (f"part/s{n:04d}", {"png": image_bytes(p), "cls": str(n % 3).encode(), "json": b"{}"})
        for n, p in enumerate(pixels)
    ]
    tar = write_webdataset(tmp_path / "train-000.tar", samples)
    index = ingest_file(store, "w/train", tar, "classification", shard_bytes=256)
    assert index.rows == 6 and index.schema.x_shape == (5, 7, 1) and index.classes == 3
    x, y = read_back(store, "w/train")
    assert np.array_equal(x[..., 0], np.stack(pixels)) and y.tolist() == [0, 1, 2, 0, 1, 2]
    arrays = [RNG.normal(size=(3, 2)).astype(np.float32) for _ in range(4)]
    folder = tmp_path / "arrays"
    folder.mkdir()
    for shard in range(2):  # a directory of tar shards, read in order of name
        part = [(f"k{shard}{n}", {"npy": npy_bytes(a), "cls": b"1"}) for n, a in enumerate(arrays)]
        write_webdataset(folder / f"{shard}.tar", part[shard * 2 : shard * 2 + 2])
    index = ingest_file(store, "w/arrays", folder, "classification")
    assert index.rows == 4 and index.schema.x_dtype == "<f4"
    x, _ = read_back(store, "w/arrays")
    assert np.array_equal(x, np.stack(arrays))


def test_bad_webdataset_samples_are_named(store: Store, tmp_path: Path) -> None:
    good = image_bytes(RNG.integers(0, 256, (4, 4, 3), dtype=np.uint8), "JPEG")
    cases = [
        ([("a", {"jpg": good, "cls": b"0"}), ("b", {"jpg": good})], "s.tar/b, record 1: a sample"),
        ([("a", {"jpg": good, "cls": b"zero"})], "s.tar/a.cls, record 0: the class is not"),
        ([("a", {"jpg": good, "cls": b"0"}), ("b", {"jpg": good[:40], "cls": b"1"})],
         "s.tar/b.jpg, record 1: not a readable JPEG"),
        ([("a", {"jpg": good, "cls": b"0"}), ("b", {"npy": npy_bytes(np.zeros(3)), "cls": b"1"})],
         "s.tar/b.npy, record 1: samples mix images and .npy arrays"),
    ]  # fmt: skip
    for n, (samples, message) in enumerate(cases):
        tar = write_webdataset(tmp_path / "s.tar", samples)
        with pytest.raises(IngestError, match=message):
            ingest_file(store, f"bad/{n}", tar, "classification")
        assert_no_data_set(store, f"bad/{n}")
    (tmp_path / "t.tar").write_bytes(b"\0" * 10)
    with pytest.raises(IngestError, match="t.tar: "):
        ingest_file(store, "bad/t", tmp_path / "t.tar", "classification")


def test_fashion_mnist_as_png_folders_ingests_to_its_own_pixels(tmp_path: Path) -> None:
    from app.storage.directory import DirectoryStore
    from benchmarks.training.common import DATA_DIR
    from benchmarks.training.image_folder import write_fashion_mnist
    from worker.training.data.idx import find_idx, read_idx
    from worker.training.data.types import DataError

    try:
        files = find_idx("fashion_mnist", DATA_DIR)
    except DataError as exc:
        pytest.skip(str(exc))
    assert write_fashion_mnist(tmp_path / "fm", limit=40) == {"train": 40, "test": 40}
    store = DirectoryStore(tmp_path / "store")
    index = ingest_file(store, "fm/train", tmp_path / "fm" / "train", "classification")
    assert index.schema.x_shape == (28, 28, 1) and index.class_names is not None
    assert index.class_names[:2] == ("0-t-shirt-top", "1-trouser")
    x = read_idx(files["train/train-images-idx3-ubyte"])[:40]
    y = read_idx(files["train/train-labels-idx1-ubyte"])[:40]
    got_x, got_y = read_back(store, "fm/train")  # in the ingest's shuffle: compared as a set

    def pairs(labels: np.ndarray, rows: np.ndarray) -> list[tuple[int, bytes]]:
        return sorted((int(k), r.tobytes()) for k, r in zip(labels, rows, strict=True))

    assert pairs(got_y, got_x[..., 0]) == pairs(y, x)
