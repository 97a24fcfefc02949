"""CSV: a header row, then one record a line, every column a number; `label_column` (the last
by default) is y, the others are x, as float32. A bad line is named by its record and line."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from app.shards.ingest.base import Chunks, Format, IngestError, Options, Source


def read(path: Path, options: Options) -> Source:
    try:
        with open(path, newline="") as f:
            head = next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise IngestError(path.name, f"not a readable CSV file: {exc}") from exc
    if not head or len(head) < 2:
        raise IngestError(path.name, "a CSV data set has a header row of two columns or more")
    label = options.label_column if options.label_column is not None else head[-1]
    if label not in head:
        raise IngestError(path.name, f"no column {label!r} in the header ({', '.join(head)})")
    at_label, features = head.index(label), len(head) - 1
    step = options.rows_per_chunk((features,), np.dtype(np.float32))

    def chunks() -> Chunks:
        x = np.empty((step, features), dtype=np.float32)
        y = np.empty(step, dtype=np.float64)
        n = 0
        for values in _records(path, head):
            y[n] = values.pop(at_label)
            x[n] = values
            n += 1
            if n == step:
                yield x.copy(), y.copy()
                n = 0
        if n:
            yield x[:n].copy(), y[:n].copy()

    return Source(chunks(), (features,), np.dtype(np.float32))


def _records(path: Path, head: list[str]) -> Iterator[list[float]]:
    """Each record's numbers, checked against the header."""
    width, record = len(head), 0
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
                        f"line {reader.line_num} has {len(row)} columns; the header has {width}",
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
                yield values
                record += 1
        except (csv.Error, UnicodeDecodeError) as exc:
            raise IngestError(path.name, f"line {reader.line_num}: {exc}", record) from exc


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


FORMAT = Format("csv", (".csv",), read)
