"""What every format is: a reader from a path (file or directory) to chunks of samples, their
shape and dtype, and the options the ingest passes it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Literal, Protocol, TypeVar

import numpy as np

from app.shards.layout import ShardError

Chunks = Iterator[tuple[np.ndarray, np.ndarray]]
Color = Literal["rgb", "grayscale"]
T = TypeVar("T")
# Decoding threads: Pillow and zlib release the GIL while they decode.
DECODE_THREADS = min(8, os.cpu_count() or 1)


class IngestError(ShardError):
    """A file that cannot become a data set; names the file and, where one is, the record."""

    def __init__(self, file: str, why: str, record: int | None = None) -> None:
        where = file if record is None else f"{file}, record {record}"
        super().__init__(f"{where}: {why}")
        self.file, self.record = file, record


@dataclass(frozen=True)
class Options:
    """What a format may be told: tables their label column, archives their arrays, images
    their size and colour; `chunk_bytes` bounds the samples read and checked at a time."""

    chunk_bytes: int
    label_column: str | None = None
    arrays: tuple[str, str] = ("x", "y")
    image_size: tuple[int, int] | None = None  # (height, width); None: the first image's
    color: Color | None = None  # None: the first image's

    def rows_per_chunk(self, x_shape: tuple[int, ...], dtype: np.dtype) -> int:
        return max(1, self.chunk_bytes // max(1, int(np.prod(x_shape)) * dtype.itemsize))


@dataclass
class Source:
    """A file's samples, read lazily: chunks of (x, y) along the first axis, every x of
    `x_shape` and `x_dtype`; `class_names` when the layout names the classes (label i is
    class_names[i])."""

    chunks: Chunks
    x_shape: tuple[int, ...]
    x_dtype: np.dtype
    class_names: list[str] | None = None


class Reader(Protocol):
    def __call__(self, path: Path, options: Options) -> Source: ...


@dataclass(frozen=True)
class Format:
    """One format: its name (`format=` picks it), the file suffixes and the kind of directory
    it is sniffed from, and its reader."""

    name: str
    suffixes: tuple[str, ...]
    read: Reader
    # Whether a directory is of this format when `format` is not given (None: files only).
    claims_directory: Callable[[Path], bool] | None = None


def files_of(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The file itself, or a directory's files with one of the suffixes, by name."""
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
        if not found:
            raise IngestError(path.name, f"the directory holds no {' or '.join(suffixes)} file")
        return found
    return [path]


def decoded_chunks(
    head: tuple[np.ndarray, int],
    items: Iterable[T],
    decode: Callable[[T, int], tuple[np.ndarray, int]],
    step: int,
) -> Chunks:
    """Chunks of `step` records: `head` (record 0), then decode(item, record) of each item,
    decoded by a few threads a chunk at a time and kept in order, so an error names the
    first bad record."""
    x = np.empty((step, *head[0].shape), dtype=head[0].dtype)
    y = np.empty(step, dtype=np.int64)
    x[0], y[0] = head
    n, record, rest = 1, 1, iter(items)
    with ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="ingest-decode") as pool:
        while batch := list(islice(rest, step - n)):
            numbers = range(record, record + len(batch))
            for at, (xi, yi) in enumerate(pool.map(decode, batch, numbers), start=n):
                x[at], y[at] = xi, yi
            n, record = n + len(batch), record + len(batch)
            if n == step:
                yield x.copy(), y.copy()
                n = 0
    if n:
        yield x[:n].copy(), y[:n].copy()
