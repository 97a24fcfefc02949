"""Files into shards and an index: every record read once and checked, in bounded memory (a
chunk of rows at a time), one module per format (see registry):

- npz: arrays `x` and `y` (or the pair `arrays` names); npy: one structured array;
- csv: a header row, every column a number, `label_column` is y;
- parquet: number and fixed-size-list columns, `label_column` is y;
- image_folder: one subfolder per class of JPEG or PNG files, made records of one size;
- webdataset: tar shards of `<key>.jpg|png|npy` with `<key>.cls`.

A bad record fails the ingest with IngestError naming the file and the record; the writer then
deletes every shard it stored, and the index, written last, never was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from app.shards.index import ShardIndex
from app.shards.ingest.base import Color, IngestError, Options
from app.shards.ingest.registry import FORMATS, format_of
from app.shards.layout import RecordError, Schema, ShardError
from app.shards.writer import DEFAULT_SHARD_BYTES, ShardWriter
from app.storage.base import Store

CHUNK_ROWS_BYTES = 8 * 1024 * 1024  # rows read and checked at a time, at most this many bytes
Task = Literal["classification", "regression"]


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
    format: str | None = None,
    image_size: int | tuple[int, int] | None = None,
    color: Color | None = None,
) -> ShardIndex:
    """Write the records of the file (or directory) at `path` as the data set under `prefix`;
    its index. `format` is one of FORMATS, or None: sniffed from the path. Images are made
    `image_size` (one side, or (height, width)) and `color` (rgb or grayscale); by default
    the first image's."""
    kind = format_of(path, format)
    size = (image_size, image_size) if isinstance(image_size, int) else image_size
    options = Options(CHUNK_ROWS_BYTES, label_column, arrays, size, color)
    source = kind.read(path, options)
    y_kind: Literal["class", "target"] = "class" if task == "classification" else "target"
    if source.class_names is not None:
        if y_kind != "class":
            raise IngestError(path.name, f"{kind.name} labels are classes: task classification")
        class_names = class_names if class_names is not None else source.class_names
    try:
        schema = Schema.of(source.x_shape, source.x_dtype, y_kind)
    except ShardError as exc:
        raise IngestError(path.name, str(exc)) from exc
    writer = ShardWriter(store, prefix, schema, shard_bytes=shard_bytes, class_names=class_names)
    with writer:
        for xs, ys in source.chunks:
            try:
                writer.add_batch(xs, ys)
            except RecordError as exc:
                raise IngestError(path.name, exc.why, exc.record) from exc
    assert writer.index is not None
    return writer.index


__all__ = ["CHUNK_ROWS_BYTES", "FORMATS", "IngestError", "ingest_file"]
