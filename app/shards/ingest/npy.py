"""`.npy`: one structured array with fields `x` and `y` (a shard is one), memory-mapped and
read a chunk at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.shards.ingest.base import Chunks, Format, IngestError, Options, Source


def read(path: Path, options: Options) -> Source:
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
    step = options.rows_per_chunk(x_shape, x_dtype)

    def chunks() -> Chunks:
        for at in range(0, len(array), step):
            part = np.asarray(array[at : at + step])  # read from the map, a chunk at a time
            yield part["x"], part["y"]

    return Source(chunks(), tuple(x_shape), x_dtype)


FORMAT = Format("npy", (".npy",), read)
