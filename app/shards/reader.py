"""Samples by global id, from any data set's shards: the random-access reader.

Every read goes through a ShardCache: the shard holding a sample is fetched whole, checked
against its sha256, and kept while the cache has room, so reading a range or a batch of ids
fetches each shard it touches once. Memory is the cache's budget (at least the largest shard).
"""

from __future__ import annotations

from types import TracebackType

import numpy as np

from app.shards.cache import DEFAULT_FETCH_WORKERS, CacheStats, ShardCache
from app.shards.index import ShardIndex, read_index
from app.storage.base import Store

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


class ShardReader:
    """The samples of the data set under `prefix` (its index read now, unless given)."""

    def __init__(
        self,
        store: Store,
        prefix: str,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        index: ShardIndex | None = None,
        fetch_workers: int = DEFAULT_FETCH_WORKERS,
    ) -> None:
        self.index = index if index is not None else read_index(store, prefix)
        self.cache = ShardCache(store, prefix, self.index, cache_bytes, fetch_workers=fetch_workers)

    def __len__(self) -> int:
        return self.index.rows

    @property
    def stats(self) -> CacheStats:
        return self.cache.stats

    def take(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of these global ids, in their order: x of shape (len(ids), *x_shape)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        shard, row = self.index.locate(ids)
        schema = self.index.schema
        x = np.empty((len(ids), *schema.x_shape), dtype=schema.x)
        y = np.empty(len(ids), dtype=schema.y)
        for s in np.unique(shard):
            at = np.flatnonzero(shard == s)
            future = self.cache.acquire(int(s))
            try:
                recs = future.result()[row[at]]  # a copy: the shard may go once released
            finally:
                self.cache.release(int(s))
            x[at], y[at] = recs["x"], recs["y"]
        return x, y

    def read_range(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the ids start .. stop - 1."""
        if not 0 <= start <= stop <= self.index.rows:
            raise IndexError(f"[{start}, {stop}) is not within 0 .. {self.index.rows}")
        return self.take(np.arange(start, stop))

    def read(self, i: int) -> tuple[np.ndarray, np.generic]:
        """One sample: (x, y)."""
        x, y = self.take(np.asarray([i]))
        return x[0], y[0]

    def close(self) -> None:
        self.cache.close()

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
