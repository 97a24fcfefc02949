"""Parquet (pyarrow), a file or a directory of `.parquet` files of one schema, read in batches
of rows (one row group at a time at most, never the whole file). `label_column` (the last by
default) is y, a number. The other columns are x: numbers, or fixed-size lists of numbers (nested
for more dimensions). One list column keeps its shape and dtype; several columns are laid side
by side as float32. A null anywhere fails the ingest, naming the file, the record and the column."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.shards.ingest.base import Chunks, Format, IngestError, Options, Source, files_of


@dataclass(frozen=True)
class Column:
    name: str
    shape: tuple[int, ...]  # one value's: () for a number
    dtype: np.dtype


def _column(field: pa.Field) -> Column | None:
    """The column's per-row shape and dtype, or None when it holds no numbers."""
    kind, shape = field.type, []
    while pa.types.is_fixed_size_list(kind):
        shape.append(kind.list_size)
        kind = kind.value_type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return None
    return Column(field.name, tuple(shape), np.dtype(kind.to_pandas_dtype()))


def _layout(schema: pa.Schema, name: str, label: str | None) -> tuple[Column, list[Column]]:
    names = schema.names
    if len(names) < 2:
        raise IngestError(name, "a Parquet data set has two columns or more: x and a label")
    label = label if label is not None else names[-1]
    if label not in names:
        raise IngestError(name, f"no column {label!r} ({', '.join(names)})")
    columns = {}
    for field in schema:
        column = _column(field)
        if column is None:
            raise IngestError(
                name, f"column {field.name!r} is {field.type}: numbers or fixed-size lists only"
            )
        columns[field.name] = column
    y = columns.pop(label)
    if y.shape:
        raise IngestError(name, f"the label column {label!r} is a list, not a number")
    return y, list(columns.values())


def _values(array: Any, column: Column, name: str, first: int) -> np.ndarray:
    """A batch's column as numbers (rows, *shape); IngestError naming its first null's row."""
    flat, per_row = array, 1
    for size in (*column.shape, 0):
        if flat.null_count:
            at = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
            raise IngestError(name, f"column {column.name!r} is null", first + at // per_row)
        if size:
            flat, per_row = flat.flatten(), per_row * size
    return flat.to_numpy(zero_copy_only=False).reshape(len(array), *column.shape)


def read(path: Path, options: Options) -> Source:
    files = files_of(path, (".parquet",))
    try:
        # pre_buffer off: with it, pyarrow buffers ahead in proportion to the file, not a row group
        opened = [(f, pq.ParquetFile(f, pre_buffer=False)) for f in files]
    except (OSError, pa.ArrowException) as exc:
        raise IngestError(path.name, f"not a readable Parquet file: {exc}") from exc
    schema = opened[0][1].schema_arrow
    for file, parquet in opened[1:]:
        if not parquet.schema_arrow.equals(schema):
            raise IngestError(file.name, f"its schema differs from {opened[0][0].name}'s")
    y, xs = _layout(schema, opened[0][0].name, options.label_column)
    if len(xs) == 1 and xs[0].shape:
        x_shape, x_dtype = xs[0].shape, xs[0].dtype
    else:
        x_shape = (sum(int(np.prod(c.shape)) for c in xs),)
        x_dtype = np.dtype(np.float32)
    step = options.rows_per_chunk(x_shape, x_dtype)

    def chunks() -> Chunks:
        record = 0
        for file, parquet in opened:
            try:
                for batch in parquet.iter_batches(batch_size=step):
                    n = batch.num_rows
                    parts = [_values(batch[c.name], c, file.name, record) for c in xs]
                    x = (
                        parts[0]
                        if len(parts) == 1 and xs[0].shape
                        else np.concatenate(
                            [p.reshape(n, -1).astype(np.float32) for p in parts], axis=1
                        )
                    )
                    yield x, _values(batch[y.name], y, file.name, record)
                    record += n
            except (OSError, pa.ArrowException) as exc:
                raise IngestError(file.name, f"not readable: {exc}", record) from exc

    return Source(chunks(), x_shape, x_dtype)


def is_parquet_directory(path: Path) -> bool:
    return any(p.suffix.lower() == ".parquet" for p in path.iterdir() if p.is_file())


FORMAT = Format("parquet", (".parquet",), read, claims_directory=is_parquet_directory)
