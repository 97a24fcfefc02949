"""`.npz`: arrays `x` and `y` (another pair, such as `x_test` and `y_test`, by `arrays`), each
in C order; stored or deflated members, streamed from the archive a chunk at a time."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO

import numpy as np

from app.shards.ingest.base import Chunks, Format, IngestError, Options, Source

MAX_NPY_HEADER = 10_000


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


def read(path: Path, options: Options) -> Source:
    x_name, y_name = options.arrays
    try:
        archive = zipfile.ZipFile(path)
        members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
        missing = [name for name in options.arrays if name not in members]
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
    step = options.rows_per_chunk(sample, x_dtype)

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

    return Source(chunks(), sample, x_dtype)


FORMAT = Format("npz", (".npz",), read)
