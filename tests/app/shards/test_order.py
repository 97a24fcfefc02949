"""The epoch order over shards: a pure function of (seed, epoch, rows per shard) and the plan,
every sample once per epoch across ranks, equal batches per rank, the tail explicit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.shards.order import EpochOrder, OrderPlan, global_rank, required_bytes

UNEVEN = [7, 3, 10, 1, 5, 9, 2, 8, 6, 4, 11]  # 66 samples in 11 shards of every size


def test_the_order_is_a_pure_function_of_seed_epoch_and_index() -> None:
    plan = OrderPlan(seed=7, batch_size=8, window=3)
    a = EpochOrder(UNEVEN, plan, 2).order()
    assert np.array_equal(a, EpochOrder(list(UNEVEN), plan, 2).order())  # recomputed alone
    assert sorted(a) == list(range(sum(UNEVEN)))
    assert not np.array_equal(a, EpochOrder(UNEVEN, plan, 3).order())
    other_seed = OrderPlan(seed=8, batch_size=8, window=3)
    assert not np.array_equal(a, EpochOrder(UNEVEN, other_seed, 2).order())
    # The batch size and the rank count cut the order; they never change it.
    for batch, world in ((6, 2), (9, 3), (1, 1)):
        plan_b = OrderPlan(seed=7, batch_size=batch, world=world, window=3)
        assert np.array_equal(a, EpochOrder(UNEVEN, plan_b, 2).order())
    # A piece of it, computed alone (a few windows), is the same piece.
    order = EpochOrder(UNEVEN, plan, 2)
    assert np.array_equal(order.positions(17, 44), a[17:44])


def test_shards_are_shuffled_then_samples_within_a_window() -> None:
    starts = np.concatenate(([0], np.cumsum(UNEVEN)))
    shard_of = np.repeat(np.arange(len(UNEVEN)), UNEVEN)
    seen_orders = set()
    for epoch in range(6):
        order = EpochOrder(UNEVEN, OrderPlan(seed=1, batch_size=4, window=3), epoch)
        seen_orders.add(tuple(order.shard_order))
        ids = order.order()
        for w, shards in enumerate(order.windows):
            lo, hi = order.window_starts[w], order.window_starts[w + 1]
            window = ids[lo:hi]
            # Exactly the samples of its shards, and shuffled among them.
            expected = np.concatenate([np.arange(starts[s], starts[s + 1]) for s in shards])
            assert sorted(window) == sorted(expected)
            assert set(shard_of[window]) == set(shards.tolist())
        assert [len(w) for w in order.windows] == [3, 3, 3, 2]
    assert len(seen_orders) == 6  # the shards' order changes every epoch
    plain = EpochOrder(UNEVEN, OrderPlan(seed=1, batch_size=4, shuffle=False), 0)
    assert np.array_equal(plain.order(), np.arange(sum(UNEVEN)))


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("tail", ["split", "drop"])
def test_every_sample_once_per_epoch_across_ranks_and_equal_batches(world: int, tail: str) -> None:
    total = sum(UNEVEN)
    for local in (1, 4, 7):
        plan = OrderPlan(seed=3, batch_size=local * world, world=world, window=2, tail=tail)
        for epoch in range(3):
            order = EpochOrder(UNEVEN, plan, epoch)
            per_rank = [
                [order.rank_batch(b, r) for b in range(order.batches)] for r in range(world)
            ]
            assert all(len(batches) == order.batches for batches in per_rank)
            seen = np.concatenate([np.concatenate(batches) for batches in per_rank])
            assert len(seen) == len(set(seen.tolist())), "a sample seen twice"
            assert len(seen) + order.dropped == total
            tail_samples = total % plan.batch_size
            if tail == "drop":
                assert order.dropped == tail_samples
            else:
                assert order.dropped == tail_samples % world < world
            # The dropped ones are the order's last: nothing skipped in the middle.
            kept = order.order()[: total - order.dropped]
            assert sorted(seen.tolist()) == sorted(kept.tolist())
            # Inside a batch every rank reads as many samples.
            for b in range(order.batches):
                assert len({len(per_rank[r][b]) for r in range(world)}) == 1
            ranks, _ = order.owners(0, total)
            assert (ranks == -1).sum() == order.dropped


def test_one_node_of_two_replicas_reads_what_two_nodes_of_one_do() -> None:
    def global_batches(nodes: int, replicas: int) -> list[np.ndarray]:
        plan = OrderPlan(seed=5, batch_size=8, world=nodes * replicas, window=3)
        order = EpochOrder(UNEVEN, plan, 1)
        ranks = [global_rank(n, r, replicas) for n in range(nodes) for r in range(replicas)]
        assert sorted(ranks) == list(range(nodes * replicas))
        return [
            np.concatenate([order.rank_batch(b, rank) for rank in sorted(ranks)])
            for b in range(order.batches)
        ]

    one_by_two, two_by_one = global_batches(1, 2), global_batches(2, 1)
    assert len(one_by_two) == len(two_by_one)
    assert all(np.array_equal(a, b) for a, b in zip(one_by_two, two_by_one, strict=True))
    # And they are the global batches one rank reads (its partial last one aside).
    alone = EpochOrder(UNEVEN, OrderPlan(seed=5, batch_size=8, window=3), 1)
    for b, batch in enumerate(one_by_two):
        assert np.array_equal(batch, alone.global_batch(b)[: len(batch)])


def test_a_bad_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="evenly"):
        OrderPlan(seed=0, batch_size=10, world=3)
    with pytest.raises(ValueError):
        OrderPlan(seed=0, batch_size=10, tail="pad")
    with pytest.raises(ValueError, match="no global batch"):
        EpochOrder([3, 2], OrderPlan(seed=0, batch_size=8, tail="drop"), 0)
    # split: 5 samples over 2 ranks of 4 each -> 2 each, one dropped.
    order = EpochOrder([3, 2], OrderPlan(seed=0, batch_size=8, world=2), 0)
    assert (order.batches, order.dropped, order.tail_share) == (1, 1, 2)


def live_bytes_max(rows: list[int], sizes: list[int], plan: OrderPlan, epochs: int) -> int:
    """By brute force: the most bytes of shards one rank holds at once (from the first batch
    reading a shard to the last), over every rank and epoch."""
    starts = np.concatenate(([0], np.cumsum(rows)))
    worst = 0
    for epoch, rank in itertools.product(range(epochs), range(plan.world)):
        order = EpochOrder(rows, plan, epoch)
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for b in range(order.batches):
            for s in np.unique(np.searchsorted(starts, order.rank_batch(b, rank), "right") - 1):
                first.setdefault(int(s), b)
                last[int(s)] = b
        for b in range(order.batches):
            held = sum(sizes[s] for s in first if first[s] <= b <= last[s])
            worst = max(worst, held)
    return worst


@pytest.mark.parametrize(
    ("batch", "world", "window"), [(4, 1, 2), (8, 2, 3), (24, 3, 1), (9, 3, 4), (1, 1, 2)]
)
def test_the_memory_a_reader_needs_is_bounded_by_required_bytes(
    batch: int, world: int, window: int
) -> None:
    sizes = [100 + 10 * r for r in UNEVEN]
    plan = OrderPlan(seed=2, batch_size=batch, world=world, window=window)
    bound = required_bytes(sizes, UNEVEN, plan)
    assert live_bytes_max(UNEVEN, sizes, plan, epochs=8) <= bound <= sum(sizes)
