"""An uploaded file into shards and an index: `.npz`, `.npy` or CSV, read once, record by
record checked, in bounded memory (a chunk of rows at a time; a `.npy` memory-mapped, an `.npz`
member streamed from the archive).

- `.npz`: arrays `x` and `y` (another pair, such as `x_test` and `y_test`, by `arrays`), each
  in C order; stored or deflated members.
- `.npy`: a structured array with fields `x` and `y` (a shard is one).
- CSV: a header row, then one record a line, every column a number; `label_column` (the last
  by default) is y, the others are x, as float32.

A bad record fails the ingest with IngestError naming the file and the record (CSV: and its
line); the writer then deletes every shard it stored, and the index, written last, never was.
"""

from __future__ import annotations

import csv
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

import numpy as np

from app.shards.index import ShardIndex
from app.shards.layout import RecordError, Schema, ShardError
from app.shards.writer import DEFAULT_SHARD_BYTES, ShardWriter
from app.storage.base import Store

CHUNK_ROWS_BYTES = 8 * 1024 * 1024  # rows read and checked at a time, at most this many bytes
MAX_NPY_HEADER = 10_000
Task = Literal["classification", "regression"]


class IngestError(ShardError):
    """A file that cannot become a data set; names the file and, where one is, the record."""

    def __init__(self, file: str, why: str, record: int | None = None) -> None:
        where = file if record is None else f"{file}, record {record}"
        super().__init__(f"{where}: {why}")
        self.file, self.record = file, record


def ingest_file(
    store: Store,
    prefix: str,
    path: Path,
    task: Task,
    *,
    label_column: str | None = None,
    arrays: tuple[str, str] = ("x", "y"),
    class_names: list[str] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> ShardIndex:
    """Write the file's records as the data set under `prefix`; its index."""
    kind: Literal["class", "target"] = "class" if task == "classification" else "target"
    suffix = path.suffix.lower()
    if suffix == ".csv":
        chunks, x_shape, x_dtype = _csv(path, label_column)
    elif suffix == ".npz":
        chunks, x_shape, x_dtype = _npz(path, arrays)
    elif suffix == ".npy":
        chunks, x_shape, x_dtype = _npy(path)
    else:
        raise IngestError(path.name, "not a .npz, .npy or .csv file")
    try:
        schema = Schema.of(x_shape, x_dtype, kind)
    except ShardError as exc:
        raise IngestError(path.name, str(exc)) from exc
    writer = ShardWriter(store, prefix, schema, shard_bytes=shard_bytes, class_names=class_names)
    with writer:
        for xs, ys in chunks:
            try:
                writer.add_batch(xs, ys)
            except RecordError as exc:
                raise IngestError(path.name, exc.why, exc.record) from exc
    assert writer.index is not None
    return writer.index


Chunks = Iterator[tuple[np.ndarray, np.ndarray]]


def _rows_per_chunk(x_shape: tuple[int, ...], dtype: np.dtype) -> int:
    return max(1, CHUNK_ROWS_BYTES // max(1, int(np.prod(x_shape)) * dtype.itemsize))


def _npy(path: Path) -> tuple[Chunks, tuple[int, ...], np.dtype]:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise IngestError(path.name, f"not a readable .npy file: {exc}") from exc
    names = array.dtype.names or ()
    if array.ndim != 1 or set(names) != {"x", "y"}:
        raise IngestError(
            path.name,
            "a .npy data set is one structured array of fields x and y, not "
            f"{array.dtype} {array.shape}",
        )
    x_dtype, x_shape = array.dtype["x"].base, array.dtype["x"].shape
    step = _rows_per_chunk(x_shape, x_dtype)

    def chunks() -> Chunks:
        for at in range(0, len(array), step):
            part = np.asarray(array[at : at + step])  # read from the map, a chunk at a time
            yield part["x"], part["y"]

    return chunks(), tuple(x_shape), x_dtype


def _member_header(stream: IO[bytes], name: str) -> tuple[tuple[int, ...], np.dtype]:
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                stream, max_header_size=MAX_NPY_HEADER
            )
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                stream, max_header_size=MAX_NPY_HEADER
            )
        else:
            raise ValueError(f".npy format version {version}")
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{name}.npy: {exc}") from exc
    if fortran:
        raise ValueError(f"{name}.npy is in Fortran order; save it in C order")
    if dtype.hasobject or not shape:
        raise ValueError(f"{name}.npy holds {dtype} of shape {shape}: not numeric samples")
    return tuple(int(n) for n in shape), dtype


def _npz(path: Path, arrays: tuple[str, str]) -> tuple[Chunks, tuple[int, ...], np.dtype]:
    x_name, y_name = arrays
    try:
        archive = zipfile.ZipFile(path)
        members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
        missing = [name for name in arrays if name not in members]
        if missing:
            raise ValueError(f"no array {' or '.join(missing)} in the archive")
        with archive.open(members[x_name]) as f:
            x_shape, x_dtype = _member_header(f, x_name)
        with archive.open(members[y_name]) as f:
            y_shape, y_dtype = _member_header(f, y_name)
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise IngestError(path.name, f"not a readable data set archive: {exc}") from exc
    if len(y_shape) != 1 or y_shape[0] != x_shape[0]:
        raise IngestError(
            path.name,
            f"{y_name} has shape {y_shape}; it needs one label per sample of {x_name} "
            f"({x_shape[0]})",
        )
    rows, sample = x_shape[0], x_shape[1:]
    step = _rows_per_chunk(sample, x_dtype)

    def chunks() -> Chunks:
        with archive, archive.open(members[x_name]) as fx, archive.open(members[y_name]) as fy:
            _member_header(fx, x_name)
            _member_header(fy, y_name)
            x_bytes = int(np.prod(sample)) * x_dtype.itemsize
            for at in range(0, rows, step):
                n = min(step, rows - at)
                xb, yb = fx.read(n * x_bytes), fy.read(n * y_dtype.itemsize)
                if len(xb) != n * x_bytes or len(yb) != n * y_dtype.itemsize:
                    raise IngestError(path.name, "the archive ends before its arrays do", at)
                x = np.frombuffer(xb, dtype=x_dtype).reshape(n, *sample)
                yield x, np.frombuffer(yb, dtype=y_dtype)

    return chunks(), sample, x_dtype


def _csv(path: Path, label_column: str | None) -> tuple[Chunks, tuple[int, ...], np.dtype]:
    try:
        with open(path, newline="") as f:
            head = next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise IngestError(path.name, f"not a readable CSV file: {exc}") from exc
    if not head or len(head) < 2:
        raise IngestError(path.name, "a CSV data set has a header row of two columns or more")
    label = label_column if label_column is not None else head[-1]
    if label not in head:
        raise IngestError(path.name, f"no column {label!r} in the header ({', '.join(head)})")
    at_label, width = head.index(label), len(head)
    features = width - 1
    step = _rows_per_chunk((features,), np.dtype(np.float32))

    def chunks() -> Chunks:
        x = np.empty((step, features), dtype=np.float32)
        y = np.empty(step, dtype=np.float64)
        n, record = 0, 0
        with open(path, newline="") as f:
            reader = csv.reader(f)
            next(reader)
            try:
                for row in reader:
                    if not row:  # a blank line is no record
                        continue
                    if len(row) != width:
                        raise IngestError(
                            path.name,
                            f"line {reader.line_num} has {len(row)} columns; the header has "
                            f"{width}",
                            record,
                        )
                    try:
                        values = [float(v) for v in row]
                    except ValueError:
                        bad = next(i for i, v in enumerate(row) if not _is_number(v))
                        raise IngestError(
                            path.name,
                            f"line {reader.line_num}, column {head[bad]!r}: "
                            f"{row[bad][:40]!r} is not a number",
                            record,
                        ) from None
                    y[n] = values.pop(at_label)
                    x[n] = values
                    n, record = n + 1, record + 1
                    if n == step:
                        yield x.copy(), y.copy()
                        n = 0
            except (csv.Error, UnicodeDecodeError) as exc:
                raise IngestError(path.name, f"line {reader.line_num}: {exc}", record) from exc
        if n:
            yield x[:n].copy(), y[:n].copy()

    return chunks(), (features,), np.dtype(np.float32)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


__all__ = ["IngestError", "ingest_file"]
