"""The streaming reader over a real store (a directory and SeaweedFS): every sample once per
epoch across ranks, exact resume from a position that reads nothing it does not need, memory
within its budget, input fetched ahead, failures named."""

from __future__ import annotations

import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from app.shards.cache import READ_CHUNK, ChecksumMismatch
from app.shards.index import shard_key
from app.shards.layout import ShardError
from app.shards.order import EpochOrder, OrderPlan
from app.storage.base import Store
from app.storage.directory import DirectoryStore
from tests.app.storage.conftest import store
from tests.shard_data import CountingStore, SlowStore, Written, write_dataset
from worker.training.data.stream import Batch, Position, ShardStream, required_ram_bytes

__all__ = ["store"]

UNEVEN = [7, 3, 10, 1, 5, 9, 2, 8, 6, 4, 11]


def stream(
    store: Store, data: Written, plan: OrderPlan, rank: int, ram: int | None = None
) -> ShardStream:
    ram = ram if ram is not None else required_ram_bytes(data.index, plan)
    return ShardStream(store, "ds", plan, rank, ram_bytes=ram, index=data.index)


def read_all(s: ShardStream, start: Position, epochs: int) -> list[Batch]:
    return list(s.iterate(start, epochs))


def check_samples(data: Written, batches: list[Batch]) -> None:
    for b in batches:
        assert np.array_equal(b.x, data.x[b.ids]) and np.array_equal(b.y, data.y[b.ids])


def stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "shard-stream"]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_sample_once_per_epoch_across_ranks_with_uneven_shards(
    store: Store, world: int
) -> None:
    data = write_dataset(store, "ds", UNEVEN)
    plan = OrderPlan(seed=11, batch_size=4 * world, world=world, window=3)
    per_rank = []
    for rank in range(world):
        with stream(store, data, plan, rank) as s:
            batches = read_all(s, Position(0, 0), 2)
        check_samples(data, batches)
        per_rank.append(batches)
    counts = {len(batches) for batches in per_rank}
    assert len(counts) == 1, f"ranks ran {counts} batches"
    for epoch in range(2):
        order = EpochOrder(UNEVEN, plan, epoch)
        seen = np.concatenate([b.ids for batches in per_rank for b in batches if b.epoch == epoch])
        assert len(seen) == len(set(seen.tolist())) == sum(UNEVEN) - order.dropped
        for rank, batches in enumerate(per_rank):
            mine = [b for b in batches if b.epoch == epoch]
            assert [b.index for b in mine] == list(range(order.batches))
            for b in mine:
                assert np.array_equal(b.ids, order.rank_batch(b.index, rank))


@pytest.mark.parametrize("rank", [0, 1])
def test_resume_yields_the_rest_exactly_and_reads_only_what_is_left(
    store: Store, rank: int
) -> None:
    data = write_dataset(store, "ds", UNEVEN)
    plan = OrderPlan(seed=4, batch_size=4, world=2, window=3)
    ram = required_ram_bytes(data.index, plan) + data.index.size  # room for every shard
    with stream(store, data, plan, rank, ram) as s:
        whole = read_all(s, Position(0, 0), 3)
    per_epoch = len(whole) // 3
    starts = [(0, 1), (0, 5), (1, 0), (1, 7), (1, per_epoch - 1), (2, per_epoch // 2)]
    sizes = {e.name: e.size for e in data.index.shards}
    for epoch, batch in starts:
        at = epoch * per_epoch + batch
        counting = CountingStore(store)
        with stream(counting, data, plan, rank, ram) as s:  # type: ignore[arg-type]
            # The checkpoint after batch `at - 1` holds its next position; resume from it.
            position = whole[at - 1].next_position if at else Position(0, 0)
            assert position == Position(epoch, batch)
            rest = read_all(s, position, epoch + 1)  # to the end of this epoch
        expected = [b for b in whole[at:] if b.epoch == epoch]
        assert [(b.epoch, b.index) for b in rest] == [(b.epoch, b.index) for b in expected]
        for got, want in zip(rest, expected, strict=True):
            assert np.array_equal(got.ids, want.ids)
            assert np.array_equal(got.x, want.x) and np.array_equal(got.y, want.y)
        # Only the shards holding a sample this rank still reads, each once.
        shard_of, _ = data.index.locate(np.concatenate([b.ids for b in expected]))
        needed = {data.index.shards[s].name for s in set(shard_of.tolist())}
        assert counting.shards_read() == needed
        assert sum(counting.read[shard_key("ds", n)] for n in needed) == sum(
            sizes[n] for n in needed
        )
        assert s.stats.bytes_read == sum(sizes[n] for n in needed)


def test_the_cache_stays_within_its_budget_on_a_data_set_several_times_larger(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path)
    rows = [150 + (i * 37) % 100 for i in range(40)]  # 40 uneven shards of 150 .. 249 rows
    data = write_dataset(store, "ds", rows, x_shape=(32, 32), dtype=np.uint8)
    plan = OrderPlan(seed=9, batch_size=32, world=2, window=2)
    ram = required_ram_bytes(data.index, plan)
    assert data.index.size >= 4 * ram  # several times larger than the budget
    with stream(store, data, plan, 1, ram) as s:
        cache_budget = s.cache.budget
        warm = s.iterate(Position(0, 0), 1)
        next(warm)  # lazy imports and first-use caches: before measuring
        warm.close()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            samples = 0
            for batch in s.iterate(Position(0, 0), 3):
                assert np.array_equal(batch.x, data.x[batch.ids])
                samples += len(batch.ids)
                assert s.cache.used <= cache_budget
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        assert s.stats.peak_cache_bytes <= cache_budget
        assert samples == 3 * (sum(rows) - s.dropped_per_epoch) // 2
        assert s.stats.bytes_read >= 3 * data.index.size // 2  # read again each epoch
    # Measured, not only counted: what Python and numpy allocated stays within the budget but
    # for what it leaves out (each fetch thread's read chunks, the order's index arrays).
    extra = 2 * 2 * READ_CHUNK + 64 * 1024
    assert peak <= ram + extra, (peak, ram)


def test_a_budget_below_what_the_order_needs_is_refused_up_front(store: Store) -> None:
    data = write_dataset(store, "ds", UNEVEN)
    plan = OrderPlan(seed=0, batch_size=4, window=3)
    need = required_ram_bytes(data.index, plan)
    with pytest.raises(ShardError, match=f"need {need} bytes"):
        stream(store, data, plan, 0, need - 1)


def test_a_corrupt_shard_fails_the_stream_naming_it(store: Store) -> None:
    data = write_dataset(store, "ds", UNEVEN)
    plan = OrderPlan(seed=1, batch_size=4, window=2)
    victim = data.index.shards[4]
    key = shard_key("ds", victim.name)
    raw = bytearray(store.get(key))
    raw[victim.offset] ^= 1
    store.put(key, bytes(raw))
    with stream(store, data, plan, 0) as s:
        with pytest.raises(ChecksumMismatch, match=victim.name):
            for _ in s.iterate(Position(0, 0), 1):
                pass
    assert not stream_threads()


def test_stopping_early_leaves_no_thread_and_no_reference(store: Store) -> None:
    data = write_dataset(store, "ds", UNEVEN)
    plan = OrderPlan(seed=1, batch_size=2, window=2)
    with stream(store, data, plan, 0) as s:
        it = s.iterate(Position(0, 0), 5)
        first = [next(it) for _ in range(3)]
        it.close()  # the consumer stops (a cancelled job, an interrupted epoch)
        assert not stream_threads()
        assert all(entry.refs == 0 for entry in s.cache._entries.values())
        again = read_all(s, first[-1].next_position, 1)  # and the stream reads on from there
        assert again[0].index == 3 and np.array_equal(
            again[0].ids, EpochOrder(UNEVEN, plan, 0).rank_batch(3, 0)
        )


def test_small_data_is_read_once_and_served_from_the_cache_after(store: Store) -> None:
    data = write_dataset(store, "ds", UNEVEN)
    plan = OrderPlan(seed=2, batch_size=5, window=2)
    ram = required_ram_bytes(data.index, plan) + data.index.size
    with stream(store, data, plan, 0, ram) as s:
        read_all(s, Position(0, 0), 4)
        stats = s.stats
    assert stats.bytes_read == data.index.size and stats.fetches == len(UNEVEN)
    assert stats.cache_hits >= 3 * len(UNEVEN)
    assert stats.batches == 4 * s.batches_per_epoch and stats.samples == 4 * sum(UNEVEN)


def test_the_next_shards_arrive_while_the_consumer_works(tmp_path: Path) -> None:
    rows = [20] * 16
    store = DirectoryStore(tmp_path)
    data = write_dataset(store, "ds", rows)
    plan = OrderPlan(seed=3, batch_size=4, window=2)
    delay, step = 0.1, 0.03  # a shard takes 0.1 s; a batch's step 0.03 s (5 batches a shard)
    slow = SlowStore(store, delay)
    with stream(slow, data, plan, 0) as s:  # type: ignore[arg-type]
        for _ in s.iterate(Position(0, 0), 1):
            time.sleep(step)
        stats = s.stats
    fetching = delay * len(rows) / 2  # two fetch threads, if the consumer waited for each
    assert stats.fetches == len(rows)
    # Only the first window is waited for; the rest arrived while the consumer worked.
    assert stats.wait_seconds < fetching / 2, stats


def test_positions_round_trip_and_the_end_of_an_epoch_is_the_next_one() -> None:
    p = Position(3, 17)
    assert Position.from_json(p.to_json()) == p
    for bad in ({"epoch": -1, "batch": 0}, {"epoch": 1}, {"epoch": 1, "batch": True}, [1, 2]):
        with pytest.raises(ValueError):
            Position.from_json(bad)
    b = Batch(np.zeros((1, 1)), np.zeros(1), np.zeros(1, dtype=np.int64), 2, 9, 10)
    assert b.next_position == Position(3, 0)
