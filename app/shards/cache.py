"""Whole shards in memory, at most a budget of bytes, each checked against the index on arrival.

A shard is fetched once (streamed from the store into a buffer of the size the index gives,
hashed as it arrives) by a small pool of threads, so fetching, hashing and parsing run in
parallel with whatever the caller does. Users hold references: acquire() before using a
shard's records, release() after. A shard nobody holds stays cached until its room is needed
(least recently released goes first), so a data set that fits is read from the store once.
The bytes counted are reservations: a fetch reserves its shard's size before it allocates, so
the buffers alive never exceed the budget (plus a read chunk or two per fetching thread).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from app.shards.index import ShardIndex, shard_key
from app.shards.layout import ShardError, records
from app.storage.base import ObjectNotFound, Store

DEFAULT_FETCH_WORKERS = 2
READ_CHUNK = 256 * 1024  # a fetch's transient memory on top of its shard: a chunk or two


class ChecksumMismatch(ShardError):
    """A shard's bytes differ from what the index says (corrupt, truncated or replaced)."""

    def __init__(self, shard: str, why: str) -> None:
        super().__init__(f"shard {shard}: {why}")
        self.shard = shard


@dataclass
class CacheStats:
    fetches: int = 0  # shards read from the store
    bytes_read: int = 0  # their bytes
    hits: int = 0  # acquisitions a cached (or arriving) shard served
    peak_bytes: int = 0  # the most bytes ever reserved at once


@dataclass
class _Entry:
    size: int
    future: Future[np.ndarray]
    refs: int = 0


class ShardCache:
    """The shards of one data set (`index` under `prefix` in `store`), at most `budget_bytes`."""

    def __init__(
        self,
        store: Store,
        prefix: str,
        index: ShardIndex,
        budget_bytes: int,
        *,
        fetch_workers: int = DEFAULT_FETCH_WORKERS,
    ) -> None:
        if budget_bytes < index.max_shard_bytes:
            raise ShardError(
                f"a cache of {budget_bytes} bytes cannot hold the largest shard "
                f"({index.max_shard_bytes} bytes)"
            )
        self.store, self.prefix, self.index, self.budget = store, prefix, index, budget_bytes
        self.stats = CacheStats()
        self.used = 0  # bytes reserved: fetched or being fetched
        self._entries: dict[int, _Entry] = {}
        self._idle: OrderedDict[int, None] = OrderedDict()  # held by nobody, oldest first
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(fetch_workers, thread_name_prefix="shard-fetch")

    def try_acquire(self, shard: int) -> Future[np.ndarray] | None:
        """A reference to the shard's records (a future: they may still be arriving), or None
        when it is not cached and there is no room for it before some reference is released."""
        with self._cond:
            entry = self._entries.get(shard)
            if entry is not None and entry.refs == 0 and _failed(entry.future):
                self._evict(shard)  # a failed fetch nobody holds: try the store again
                entry = None
            if entry is not None:
                entry.refs += 1
                self._idle.pop(shard, None)
                self.stats.hits += 1
                return entry.future
            size = self.index.shards[shard].size
            if not self._make_room(size):
                return None
            entry = _Entry(size, self._pool.submit(self._fetch, shard), refs=1)
            self._entries[shard] = entry
            entry.future.add_done_callback(self._arrived)
            self.used += size
            self.stats.peak_bytes = max(self.stats.peak_bytes, self.used)
            return entry.future

    def acquire(self, shard: int, timeout: float | None = None) -> Future[np.ndarray]:
        """try_acquire, waiting for references to be released until there is room."""
        with self._cond:
            while True:
                future = self.try_acquire(shard)
                if future is not None:
                    return future
                if not self._cond.wait(timeout):
                    raise TimeoutError(f"no room for shard {shard} in {timeout} s")

    def release(self, shard: int) -> None:
        """Drop one reference; a shard nobody holds may be evicted (a failed one is at once)."""
        with self._cond:
            entry = self._entries[shard]
            entry.refs -= 1
            if entry.refs == 0:
                if _failed(entry.future):
                    self._evict(shard)
                else:
                    self._idle[shard] = None
            self._cond.notify_all()

    def _arrived(self, future: Future[np.ndarray]) -> None:
        """A fetch ended: an idle shard may now be evicted for one that waits for room."""
        with self._cond:
            self._cond.notify_all()

    def _make_room(self, size: int) -> bool:
        """Evict idle shards (fetched ones, oldest first) until `size` more bytes fit."""
        for shard in list(self._idle):
            if self.used + size <= self.budget:
                break
            if self._entries[shard].future.done():
                self._evict(shard)
        return self.used + size <= self.budget

    def _evict(self, shard: int) -> None:
        entry = self._entries.pop(shard)
        self._idle.pop(shard, None)
        self.used -= entry.size
        self._cond.notify_all()

    def _fetch(self, shard: int) -> np.ndarray:
        """Stream the shard into a buffer of its indexed size, hash it, parse its header."""
        entry = self.index.shards[shard]
        buf = bytearray(entry.size)
        view, got, digest = memoryview(buf), 0, hashlib.sha256()
        try:
            try:
                key = shard_key(self.prefix, entry.name)
                chunks = self.store.iter_bytes(key, chunk=min(READ_CHUNK, entry.size))
            except ObjectNotFound as exc:
                raise ShardError(f"shard {entry.name} is missing from the store") from exc
            for chunk in chunks:
                if got + len(chunk) > entry.size:
                    raise ChecksumMismatch(
                        entry.name, f"longer than the {entry.size} bytes indexed"
                    )
                view[got : got + len(chunk)] = chunk
                digest.update(chunk)
                got += len(chunk)
                del chunk  # not alive while the next one is read
        finally:
            with self._cond:
                self.stats.fetches += 1
                self.stats.bytes_read += got
        if got != entry.size:
            raise ChecksumMismatch(entry.name, f"{got} bytes, not the {entry.size} indexed")
        if digest.hexdigest() != entry.sha256:
            raise ChecksumMismatch(entry.name, "its sha256 is not the one in the index")
        try:
            out = records(buf, self.index.schema)
        except ShardError as exc:
            raise ShardError(f"shard {entry.name}: {exc}") from exc
        if len(out) != entry.rows:
            raise ChecksumMismatch(entry.name, f"{len(out)} rows, not the {entry.rows} indexed")
        return out

    def close(self) -> None:
        """Stop fetching (what is under way finishes) and forget every shard."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._cond:
            self._entries.clear()
            self._idle.clear()
            self.used = 0


def _failed(future: Future[np.ndarray]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is not None
