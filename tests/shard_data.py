"""Sharded data sets for the tests: written through a real store, with shards of the sizes a
test asks for, and a store that counts what is read from it; image files, image folders and
WebDataset tar shards for the ingest's tests."""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from app.shards.index import ShardIndex
from app.shards.layout import Schema
from app.shards.writer import ShardWriter
from app.storage.base import CHUNK_BYTES, Store


@dataclass
class Written:
    index: ShardIndex
    x: np.ndarray  # every sample, in global id order
    y: np.ndarray


def write_dataset(
    store: Store,
    prefix: str,
    rows_per_shard: Sequence[int],
    x_shape: tuple[int, ...] = (4, 3),
    dtype: Any = np.float32,
    classes: int = 5,
    seed: int = 0,
) -> Written:
    """Random samples, one shard of each size given (cut by hand: shards as uneven as asked)."""
    rng = np.random.default_rng(seed)
    total = sum(rows_per_shard)
    if np.dtype(dtype).kind == "f":
        x = rng.normal(size=(total, *x_shape)).astype(dtype)
    else:
        x = rng.integers(0, 100, size=(total, *x_shape)).astype(dtype)
    y = rng.integers(0, classes, size=total)
    schema = Schema.of(x_shape, dtype, "class")
    record = schema.record_bytes
    # Shards never hold more than the largest asked for: room for it, and cut each by hand.
    with ShardWriter(
        store, prefix, schema, shard_bytes=256 + record * max(rows_per_shard), classes=classes
    ) as writer:
        at = 0
        for rows in rows_per_shard:
            writer.add_batch(x[at : at + rows], y[at : at + rows])
            writer.cut()
            at += rows
    assert writer.index is not None
    assert writer.index.rows_per_shard == list(rows_per_shard)
    return Written(writer.index, x, y)


class CountingStore:
    """A store that passes every call through and counts the bytes each key gave."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.read: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, key: str, n: int) -> None:
        with self._lock:
            self.read[key] += n

    def shards_read(self) -> set[str]:
        return {key.rsplit("/", 1)[1] for key in self.read if not key.endswith("index.json")}

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        self._count(key, len(data))
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = self.inner.get_range(key, start, end)
        self._count(key, len(data))
        return data

    def iter_bytes(
        self, key: str, start: int = 0, end: int | None = None, chunk: int = CHUNK_BYTES
    ) -> Iterator[bytes]:
        source = self.inner.iter_bytes(key, start, end, chunk)

        def counted() -> Iterator[bytes]:
            for data in source:
                self._count(key, len(data))
                yield data

        return counted()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class SlowStore(CountingStore):
    """Every shard takes `delay` seconds to arrive (a far store's latency, on a real store);
    the delay may change while the store is in use."""

    def __init__(self, inner: Store, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay

    def iter_bytes(
        self, key: str, start: int = 0, end: int | None = None, chunk: int = CHUNK_BYTES
    ) -> Iterator[bytes]:
        time.sleep(self.delay)
        return super().iter_bytes(key, start, end, chunk)


def image_bytes(pixels: np.ndarray, kind: str = "PNG") -> bytes:
    """An image file's bytes: uint8 pixels (H, W) grey or (H, W, 3) RGB, as PNG or JPEG."""
    out = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(out, format=kind)
    return out.getvalue()


def write_image_folder(root: Path, classes: dict[str, list[bytes]], suffix: str = ".png") -> Path:
    """An image folder: one subfolder per class, its images named 000.png, 001.png, ..."""
    for name, images in classes.items():
        (root / name).mkdir(parents=True)
        for n, data in enumerate(images):
            (root / name / f"{n:03d}{suffix}").write_bytes(data)
    return root


def write_webdataset(path: Path, samples: Sequence[tuple[str, dict[str, bytes]]]) -> Path:
    """A tar shard in the WebDataset layout: each (key, {extension: bytes}) as `key.extension`
    members, one after another."""
    with tarfile.open(path, "w") as tar:
        for key, parts in samples:
            for extension, data in parts.items():
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()
