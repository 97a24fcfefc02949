"""Samples in, shards and an index out, through a Store.

Each shard is staged in a local temporary file (records appended as they come, the header
written last over room reserved for it), hashed, stored, and deleted locally, so writing holds
one batch of samples in memory and one shard on local disk. The index is stored last, by
close(): until then the prefix holds no data set (a reader finds IndexMissing), and a writer
that fails or is aborted deletes what it stored. Shards are immutable: a prefix that already
has an index is refused.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from app.shards.index import INDEX, ShardEntry, ShardIndex, shard_key
from app.shards.layout import RecordError, Schema, ShardError, header
from app.storage.base import CHUNK_BYTES, ObjectNotFound, Store, check_prefix

DEFAULT_SHARD_BYTES = 64 * 1024 * 1024  # tens of MB: one ranged GET, one cache entry
BATCH = 1024  # samples write_shards hands the writer at a time


class ShardWriter:
    """Write the samples given to add/add_batch as shards of about `shard_bytes` under `prefix`.

    Classes: `class_names` fixes them (labels 0 .. len-1); `classes` fixes only their count;
    with neither, a class data set has max(label) + 1 classes.
    """

    def __init__(
        self,
        store: Store,
        prefix: str,
        schema: Schema,
        *,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        class_names: list[str] | None = None,
        classes: int | None = None,
        staging: Path | None = None,
    ) -> None:
        self.store, self.schema = store, schema
        self.prefix = check_prefix(prefix.strip("/"))
        if not self.prefix:
            raise ValueError("a data set's shards need a prefix of their own")
        if class_names is not None:
            if classes is not None and classes != len(class_names):
                raise ValueError(f"{classes} classes but {len(class_names)} class names")
            classes = len(class_names)
        if schema.y_kind == "target" and classes is not None:
            raise ValueError("a target data set has no classes")
        self.class_names = None if class_names is None else tuple(class_names)
        self.classes = classes
        try:
            store.head(shard_key(self.prefix, INDEX))
        except ObjectNotFound:
            pass
        else:
            raise ShardError(f"{self.prefix} already holds a data set: shards are immutable")
        # A prefix without an index holds nothing that counts: a writer that died left it.
        store.delete_prefix(self.prefix + "/")
        record = schema.record_bytes
        bound = max(1, shard_bytes // record)
        self.rows_per_shard = max(1, (shard_bytes - len(header(schema, 0, bound))) // record)
        self.samples = 0  # records added so far (errors name the record by this count)
        self.index: ShardIndex | None = None
        self._entries: list[ShardEntry] = []
        self._max_label = -1
        self._rows = 0  # in the shard being staged
        self._file: BinaryIO | None = None
        self._staging = Path(tempfile.mkdtemp(prefix="epochal-shards-", dir=staging))
        self._done = False

    # -- adding samples -------------------------------------------------------------------

    def add(self, x: Any, y: Any) -> None:
        """One sample."""
        self.add_batch(np.asarray(x)[None], np.asarray(y)[None])

    def add_batch(self, xs: Any, ys: Any) -> None:
        """Samples along the first axis; checked before any of them is written."""
        if self._done:
            raise ShardError("the writer is closed")
        xs, ys = np.asarray(xs), np.asarray(ys)
        if xs.shape[1:] != self.schema.x_shape or ys.shape != (len(xs),):
            raise RecordError(
                self.samples,
                f"samples of shape {xs.shape[1:]} with labels of shape {ys.shape[1:]}; the "
                f"schema is x {self.schema.x_shape} and one y each",
            )
        x, y = self._x(xs), self._y(ys)
        done = 0
        while done < len(x):
            take = min(self.rows_per_shard - self._rows, len(x) - done)
            chunk = np.empty(take, dtype=self.schema.record)
            chunk["x"], chunk["y"] = x[done : done + take], y[done : done + take]
            self._open().write(chunk.data)
            self._rows += take
            done += take
            if self._rows == self.rows_per_shard:
                self.cut()
        self.samples += len(x)

    def _bad(self, mask: np.ndarray, why: str) -> RecordError:
        first = int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1))[0])
        return RecordError(self.samples + first, why)

    def _x(self, xs: np.ndarray) -> np.ndarray:
        want = self.schema.x
        if xs.dtype.kind not in "biuf":
            raise RecordError(self.samples, f"x of dtype {xs.dtype} is not numeric")
        if xs.dtype.kind == "f":
            finite = np.isfinite(xs)
            if not finite.all():
                raise self._bad(~finite, "x is not finite (NaN or infinity)")
        if np.can_cast(xs.dtype, want, "safe"):
            return xs.astype(want, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            cast = xs.astype(want)
        if want.kind == "f":  # float64 -> float32 rounds; it must not overflow
            lost = ~np.isfinite(cast)
        else:
            lost = cast != xs
        if lost.any():
            raise self._bad(lost, f"x does not fit the data set's dtype {want}")
        return cast

    def _y(self, ys: np.ndarray) -> np.ndarray:
        if ys.dtype.kind not in "biuf":
            raise RecordError(self.samples, f"y of dtype {ys.dtype} is not numeric")
        if self.schema.y_kind == "target":
            y = ys.astype(np.float32)
            if not np.isfinite(y).all():
                raise self._bad(~np.isfinite(y), "the target is not a finite float32")
            return y
        y = ys.astype(np.int64)
        top = self.classes
        wrong = (y != ys) | (y < 0)
        if top is not None:
            wrong |= y >= top
        if wrong.any():
            limit = "a whole number >= 0" if top is None else f"a class 0 .. {top - 1}"
            raise self._bad(wrong, f"the label is not {limit}")
        if len(y):
            self._max_label = max(self._max_label, int(y.max()))
        return y

    # -- shards ---------------------------------------------------------------------------

    def _open(self) -> BinaryIO:
        if self._file is None:
            path = self._staging / f"shard-{len(self._entries):06d}.npy"
            self._file = open(path, "wb")  # noqa: SIM115 (closed by cut or abort)
            self._file.write(header(self.schema, 0, self.rows_per_shard))  # room, for now
        return self._file

    def cut(self) -> None:
        """End the shard being staged now (if it holds a record): store it."""
        if self._file is None or self._rows == 0:
            return
        file, rows = self._file, self._rows
        file.seek(0)
        file.write(header(self.schema, rows, self.rows_per_shard))
        file.close()
        self._file, self._rows = None, 0
        path = Path(file.name)
        name = path.name
        size, digest = path.stat().st_size, _sha256(path)
        self.store.put_file(shard_key(self.prefix, name), path)
        path.unlink()
        offset = size - rows * self.schema.record_bytes
        self._entries.append(ShardEntry(name, rows, size, offset, digest))

    def close(self) -> ShardIndex:
        """Store the last shard, then the index; the data set's index."""
        if self.index is not None:
            return self.index
        try:
            self.cut()
            if not self._entries:
                raise ShardError("no samples: a data set holds at least one")
            classes = self.classes
            if self.schema.y_kind == "class" and classes is None:
                classes = self._max_label + 1
            index = ShardIndex.build(self.schema, tuple(self._entries), classes, self.class_names)
            self.store.put(shard_key(self.prefix, INDEX), index.to_json())
        except BaseException:
            self.abort()
            raise
        self.index, self._done = index, True
        shutil.rmtree(self._staging, ignore_errors=True)
        return index

    def abort(self) -> None:
        """Forget everything: the staged shard, and every shard stored (no index was)."""
        self._done = True
        if self._file is not None:
            self._file.close()
            self._file = None
        shutil.rmtree(self._staging, ignore_errors=True)
        if self.index is None:
            self.store.delete_prefix(self.prefix + "/")

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as src:
        while data := src.read(CHUNK_BYTES):
            digest.update(data)
    return digest.hexdigest()


def write_shards(
    store: Store,
    prefix: str,
    schema: Schema,
    samples: Any,
    **options: Any,
) -> ShardIndex:
    """Every (x, y) of the iterable `samples` as shards and an index under `prefix` (see
    ShardWriter for the options); nothing is left under `prefix` if it fails."""
    with ShardWriter(store, prefix, schema, **options) as writer:
        xs: list[Any] = []
        ys: list[Any] = []
        for x, y in samples:
            x = np.asarray(x)
            if x.shape != schema.x_shape or np.ndim(y) != 0:
                raise RecordError(
                    writer.samples + len(xs),
                    f"a sample of shape {x.shape} with a label of shape {np.shape(y)}; the "
                    f"schema is x {schema.x_shape}, one y",
                )
            xs.append(x)
            ys.append(y)
            if len(xs) == BATCH:
                writer.add_batch(np.stack(xs), np.asarray(ys))
                xs, ys = [], []
        if xs:
            writer.add_batch(np.stack(xs), np.asarray(ys))
    assert writer.index is not None
    return writer.index
