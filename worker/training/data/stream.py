"""The streaming reader: one rank's batches of a sharded data set, from a position, in bounded
memory, its input fetched ahead.

The epoch order (app.shards.order) is known in advance, so a background thread plans which
shards this rank needs and when ("uses": a shard, the first and the last batch that reads it),
acquires them from a ShardCache in that order, as far ahead as the cache's budget allows
(fetch threads download and check them meanwhile), assembles each batch as copies of its
rows, and releases a shard after the last batch that reads it. Batches wait in a queue of
`prefetch_batches` for the consumer.

Position (epoch, batch) is the next batch to read. A stream started from a position yields
exactly the batches an uninterrupted one yields from there, and fetches only the shards that
this rank still reads from there: none whose rows were all consumed.

Memory: `ram_bytes` covers the cache of whole shards and the batches in flight (the queue,
the one being assembled and the one the consumer holds); it must be at least
required_ram_bytes() (about two windows of shards), which is checked at construction, so a
stream never waits for room that only its own progress could free. Besides it: the order's
index arrays (8 bytes per sample of the windows in use) and one read chunk per fetch thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.shards.cache import DEFAULT_FETCH_WORKERS, ShardCache
from app.shards.index import ShardIndex, read_index
from app.shards.layout import ShardError
from app.shards.order import EpochOrder, OrderPlan, required_bytes
from app.storage.base import Store

DEFAULT_PREFETCH_BATCHES = 2
LOOKAHEAD_WINDOWS = 2  # how far the producer fetches ahead, at most (room permitting)
POLL_SECONDS = 0.1  # how often a blocked producer looks whether it was told to stop


@dataclass(frozen=True)
class Position:
    """Where a rank's reading stands: the next batch to read, in that epoch."""

    epoch: int
    batch: int

    def to_json(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch}

    @classmethod
    def from_json(cls, body: Any) -> Position:
        if not isinstance(body, dict) or set(body) != {"epoch", "batch"}:
            raise ValueError(f"a position is {{'epoch': E, 'batch': B}}, not {body!r}")
        epoch, batch = body["epoch"], body["batch"]
        if not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (epoch, batch)
        ):
            raise ValueError(f"a position holds whole numbers >= 0: {body!r}")
        return cls(epoch, batch)


@dataclass
class Batch:
    x: np.ndarray  # (n, *x_shape), the data set's dtype
    y: np.ndarray  # (n,): int64 classes or float32 targets
    ids: np.ndarray  # (n,) int64: the samples' global ids
    epoch: int
    index: int  # the batch's number in its epoch
    batches: int  # per epoch, for every rank

    @property
    def next_position(self) -> Position:
        """Where a resumed reader starts after this batch (the checkpoint's position)."""
        if self.index + 1 < self.batches:
            return Position(self.epoch, self.index + 1)
        return Position(self.epoch + 1, 0)


@dataclass
class StreamStats:
    batches: int = 0
    samples: int = 0
    wait_seconds: float = 0.0  # the consumer's time blocked on the next batch
    bytes_read: int = 0  # shard bytes fetched from the store
    fetches: int = 0
    cache_hits: int = 0  # shard uses served from the cache without a fetch
    peak_cache_bytes: int = 0


def input_counts(now: StreamStats, before: StreamStats) -> list[int]:
    """What a stream's cache did between two snapshots of its stats: [bytes read from the
    store, shard uses served from the cache (hits), shard uses that fetched (misses)]."""
    return [
        now.bytes_read - before.bytes_read,
        now.cache_hits - before.cache_hits,
        now.fetches - before.fetches,
    ]


@dataclass(frozen=True)
class _Use:
    shard: int
    first: int  # the sequence numbers (see _seq) of the first and last batch reading it
    last: int


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


def required_ram_bytes(
    index: ShardIndex,
    plan: OrderPlan,
    prefetch_batches: int = DEFAULT_PREFETCH_BATCHES,
    rows: int | None = None,
) -> int:
    """The least `ram_bytes` a stream of this data set and plan accepts."""
    per_shard = streamed_rows(index, rows)
    sizes = [s.size for s in index.shards[: len(per_shard)]]
    return required_bytes(sizes, per_shard, plan) + (prefetch_batches + 2) * batch_bytes(
        index, plan
    )


def streamed_rows(index: ShardIndex, rows: int | None) -> list[int]:
    """Rows per shard of the ids 0 .. rows - 1 (every id when None): the shards before the
    one holding id rows - 1 whole, that one up to it, none after."""
    if rows is None or rows >= index.rows:
        return index.rows_per_shard
    if rows < 1:
        raise ValueError("a stream reads at least one sample")
    last = int(np.searchsorted(index.starts, rows, side="left"))  # shards 0 .. last - 1
    return [*index.rows_per_shard[: last - 1], rows - int(index.starts[last - 1])]


def batch_bytes(index: ShardIndex, plan: OrderPlan) -> int:
    """One rank's batch: x, y and the ids."""
    schema = index.schema
    per_sample = schema.x.itemsize * int(np.prod(schema.x_shape)) + schema.y.itemsize + 8
    return plan.local_batch * per_sample


class ShardStream:
    """Rank `rank`'s batches of the data set under `prefix`, in the order `plan` fixes."""

    def __init__(
        self,
        store: Store,
        prefix: str,
        plan: OrderPlan,
        rank: int,
        *,
        ram_bytes: int,
        index: ShardIndex | None = None,
        prefetch_batches: int = DEFAULT_PREFETCH_BATCHES,
        fetch_workers: int = DEFAULT_FETCH_WORKERS,
        rows: int | None = None,
    ) -> None:
        if not 0 <= rank < plan.world:
            raise ValueError(f"rank {rank} of {plan.world}")
        if prefetch_batches < 1:
            raise ValueError("prefetch_batches is at least 1")
        self.index = index if index is not None else read_index(store, prefix)
        self.plan, self.rank, self.prefetch_batches = plan, rank, prefetch_batches
        self.rows_per_shard = streamed_rows(self.index, rows)  # the ids streamed: a head
        needed = required_ram_bytes(self.index, plan, prefetch_batches, rows)
        if ram_bytes < needed:
            raise ShardError(
                f"a reader of {ram_bytes} bytes cannot stream this data set: its shards "
                f"(largest {self.index.max_shard_bytes} bytes) in windows of {plan.window} and "
                f"batches of {plan.local_batch} need {needed} bytes; give more memory, or "
                "use a smaller window or smaller shards"
            )
        cache_bytes = ram_bytes - (prefetch_batches + 2) * batch_bytes(self.index, plan)
        self.cache = ShardCache(store, prefix, self.index, cache_bytes, fetch_workers=fetch_workers)
        first = EpochOrder(self.rows_per_shard, plan, 0)
        self.batches_per_epoch, self.dropped_per_epoch = first.batches, first.dropped
        self._stats = StreamStats()
        self._running = False

    @property
    def stats(self) -> StreamStats:
        cache = self.cache.stats
        s = self._stats
        return StreamStats(
            s.batches,
            s.samples,
            s.wait_seconds,
            cache.bytes_read,
            cache.fetches,
            cache.hits,
            cache.peak_bytes,
        )

    def _seq(self, epoch: int, batch: int) -> int:
        return epoch * self.batches_per_epoch + batch

    def iterate(self, start: Position, epochs: int) -> Iterator[Batch]:
        """This rank's batches from `start` to the end of epoch `epochs - 1`."""
        if start.batch > self.batches_per_epoch:
            raise ValueError(f"batch {start.batch} of an epoch of {self.batches_per_epoch}")
        if start.batch == self.batches_per_epoch:  # the position after an epoch's last batch
            start = Position(start.epoch + 1, 0)
        if self._running:
            raise RuntimeError("a stream reads one sequence at a time")
        self._running = True
        out: queue.Queue[Any] = queue.Queue(maxsize=self.prefetch_batches)
        stop = threading.Event()
        producer = threading.Thread(
            target=self._produce, args=(start, epochs, out, stop), name="shard-stream", daemon=True
        )
        producer.start()
        try:
            while True:
                began = time.perf_counter()
                item = out.get()
                self._stats.wait_seconds += time.perf_counter() - began
                if item is _END:
                    return
                if isinstance(item, _Failed):
                    raise item.exc
                self._stats.batches += 1
                self._stats.samples += len(item.ids)
                yield item
        finally:
            stop.set()
            while producer.is_alive():
                try:  # unblock a producer waiting to put
                    out.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    pass
            producer.join()
            self._running = False

    def _uses(self, start: Position, epochs: int) -> Iterator[_Use]:
        """Every use of a shard by this rank from `start` on, in order of its first batch."""
        for epoch in range(start.epoch, epochs):
            order = EpochOrder(self.rows_per_shard, self.plan, epoch)
            skip = start.batch if epoch == start.epoch else 0
            for w in range(len(order.windows)):
                lo, hi = int(order.window_starts[w]), int(order.window_starts[w + 1])
                rank, batch = order.owners(lo, hi)
                mine = (rank == self.rank) & (batch >= skip)
                if not mine.any():
                    continue
                shard, _ = self.index.locate(order.window_ids(w)[mine])
                batch = batch[mine]
                uses = []
                for s in np.unique(shard):
                    of = batch[shard == s]
                    uses.append(
                        _Use(
                            int(s), self._seq(epoch, int(of.min())), self._seq(epoch, int(of.max()))
                        )
                    )
                yield from sorted(uses, key=lambda u: (u.first, u.shard))

    def _produce(
        self, start: Position, epochs: int, out: queue.Queue[Any], stop: threading.Event
    ) -> None:
        held: dict[int, int] = {}  # shard -> uses holding it
        live: dict[int, Future[np.ndarray]] = {}
        ends: dict[int, list[int]] = {}  # batch seq -> shards whose use ends there
        try:
            uses = self._uses(start, epochs)
            pending: deque[_Use] = deque()
            ahead: deque[int] = deque()  # first batches of the uses acquired ahead
            lookahead = LOOKAHEAD_WINDOWS * self.plan.window
            exhausted = False
            for epoch in range(start.epoch, epochs):
                order = EpochOrder(self.rows_per_shard, self.plan, epoch)
                first = start.batch if epoch == start.epoch else 0
                for b in range(first, order.batches):
                    seq = self._seq(epoch, b)
                    while ahead and ahead[0] <= seq:
                        ahead.popleft()
                    # Acquire, in order, every use that starts by this batch, then later ones
                    # while there is room (and no more than LOOKAHEAD_WINDOWS windows ahead).
                    while True:
                        if not pending and not exhausted:
                            nxt = next(uses, None)
                            if nxt is None:
                                exhausted = True
                            else:
                                pending.append(nxt)
                        if not pending:
                            break
                        use = pending[0]
                        if use.first > seq and len(ahead) >= lookahead:
                            break
                        future = self.cache.try_acquire(use.shard)
                        if future is None:
                            if use.first <= seq:
                                raise ShardError(
                                    f"no room for shard {use.shard} within the reader's budget"
                                )
                            break
                        pending.popleft()
                        if use.first > seq:
                            ahead.append(use.first)
                        held[use.shard] = held.get(use.shard, 0) + 1
                        live[use.shard] = future
                        ends.setdefault(use.last, []).append(use.shard)
                    batch = self._assemble(order, epoch, b, live)
                    for shard in ends.pop(seq, []):
                        held[shard] -= 1
                        if not held[shard]:
                            del held[shard], live[shard]
                        self.cache.release(shard)
                    if not self._put(out, batch, stop):
                        return
            self._put(out, _END, stop)
        except BaseException as exc:  # noqa: BLE001 (handed to the consumer, which raises it)
            self._put(out, _Failed(exc), stop)
        finally:
            for shard, count in held.items():
                for _ in range(count):
                    self.cache.release(shard)

    def _assemble(
        self, order: EpochOrder, epoch: int, b: int, live: dict[int, Future[np.ndarray]]
    ) -> Batch:
        ids = order.rank_batch(b, self.rank)
        shard, row = self.index.locate(ids)
        schema = self.index.schema
        x = np.empty((len(ids), *schema.x_shape), dtype=schema.x)
        y = np.empty(len(ids), dtype=schema.y)
        for s in np.unique(shard):
            at = np.flatnonzero(shard == s)
            recs = live[int(s)].result()[row[at]]
            x[at], y[at] = recs["x"], recs["y"]
        return Batch(x, y, ids, epoch, b, order.batches)

    @staticmethod
    def _put(out: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        self.cache.close()

    def __enter__(self) -> ShardStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
