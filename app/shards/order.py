"""Each epoch's sample order over a sharded data set, and every rank's share of it.

A pure function of the plan (seed, global batch, ranks, window, tail, shuffle), the epoch and
the index's rows per shard: nothing else (not the machine, not where a resumed attempt
starts), so every rank and every attempt computes the same order alone.

1. The shards are permuted (generator seeded by [seed, epoch, 4]).
2. That sequence is cut into windows of `window` shards (the last may hold fewer); the samples
   of window w (their global ids, shard by shard) are permuted together (seed
   [seed, epoch, 3, w]). The epoch's order is the windows' orders one after another: every
   sample exactly once.
3. The order is cut into global batches of `batch_size`; rank r of `world` takes slice r
   (batch_size / world samples in a row) of each. So every world size sees the same global
   batches, whatever the split into nodes and replicas (1 x 2 is 2 x 1).
4. The tail, the T mod batch_size samples after the last full global batch, is explicit:
   `split` (the default) gives every rank floor(tail / world) of them as one last, smaller
   batch and drops the tail mod world that remain (fewer than `world`; none with one rank);
   `drop` drops the whole tail. `dropped` says how many, every epoch. Nothing is repeated, and
   every rank runs the same number of batches.

With shuffle off, shards and samples keep the index's order (the same windows and batches).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TAILS = ("split", "drop")
DEFAULT_WINDOW = 4
SHARDS_TAG, WINDOW_TAG = 4, 3  # 1 and 2 are the in-memory order's and dropout's (splits.py)
MEMO_WINDOWS = 4


@dataclass(frozen=True)
class OrderPlan:
    """What fixes the order besides the epoch and the data set."""

    seed: int
    batch_size: int  # the global batch: samples per optimizer step over all ranks
    world: int = 1  # ranks: nodes x replicas per node
    window: int = DEFAULT_WINDOW  # shards whose samples are shuffled together
    shuffle: bool = True
    tail: str = "split"

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.world < 1 or self.window < 1:
            raise ValueError("batch_size, world and window are at least 1")
        if self.batch_size % self.world:
            raise ValueError(
                f"a global batch of {self.batch_size} does not split evenly over {self.world} ranks"
            )
        if self.tail not in TAILS:
            raise ValueError(f"tail is one of {TAILS}, not {self.tail!r}")

    @property
    def local_batch(self) -> int:
        return self.batch_size // self.world


def global_rank(node: int, local_rank: int, replicas_per_node: int) -> int:
    """The rank of replica `local_rank` on node `node`: nodes in order, replicas within."""
    return node * replicas_per_node + local_rank


class EpochOrder:
    """One epoch's order; windows are permuted when first asked for (a few kept)."""

    def __init__(self, rows_per_shard: Sequence[int], plan: OrderPlan, epoch: int) -> None:
        self.plan, self.epoch = plan, epoch
        self.rows = np.asarray(rows_per_shard, dtype=np.int64)
        if self.rows.ndim != 1 or not len(self.rows) or (self.rows < 1).any():
            raise ValueError("a data set has shards of at least one row each")
        self.starts = np.concatenate(([0], np.cumsum(self.rows)))
        self.total = int(self.starts[-1])
        g, n = plan.batch_size, plan.world
        self.full = self.total // g  # full global batches
        tail = self.total - self.full * g
        self.tail_share = tail // n if plan.tail == "split" else 0  # each rank's last batch
        self.batches = self.full + (1 if self.tail_share else 0)  # per rank, every rank
        self.dropped = tail - self.tail_share * n
        if self.batches == 0:
            raise ValueError(f"{self.total} samples make no global batch of {g} (tail {plan.tail})")
        shards = len(self.rows)
        if plan.shuffle:
            rng = np.random.default_rng([plan.seed, epoch, SHARDS_TAG])
            self.shard_order = rng.permutation(shards)
        else:
            self.shard_order = np.arange(shards)
        self.windows = [
            self.shard_order[i : i + plan.window] for i in range(0, shards, plan.window)
        ]
        sizes = [int(self.rows[w].sum()) for w in self.windows]
        self.window_starts = np.concatenate(([0], np.cumsum(sizes)))  # epoch positions
        self._memo: OrderedDict[int, np.ndarray] = OrderedDict()

    def window_ids(self, w: int) -> np.ndarray:
        """The global ids of window w, in the epoch's order."""
        if w in self._memo:
            self._memo.move_to_end(w)
            return self._memo[w]
        ids = np.concatenate(
            [np.arange(self.starts[s], self.starts[s + 1]) for s in self.windows[w]]
        )
        if self.plan.shuffle:
            rng = np.random.default_rng([self.plan.seed, self.epoch, WINDOW_TAG, w])
            ids = ids[rng.permutation(len(ids))]
        self._memo[w] = ids
        if len(self._memo) > MEMO_WINDOWS:
            self._memo.popitem(last=False)
        return ids

    def positions(self, start: int, stop: int) -> np.ndarray:
        """The global ids at epoch positions start .. stop - 1."""
        if not 0 <= start <= stop <= self.total:
            raise IndexError(f"positions [{start}, {stop}) of {self.total}")
        first = int(np.searchsorted(self.window_starts, start, side="right")) - 1
        parts, w = [], first
        while w < len(self.windows) and self.window_starts[w] < stop:
            base = int(self.window_starts[w])
            ids = self.window_ids(w)
            parts.append(ids[max(start - base, 0) : min(stop - base, len(ids))])
            w += 1
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def span(self, batch: int, rank: int) -> tuple[int, int]:
        """The epoch positions of rank `rank`'s share of global batch `batch`."""
        if not 0 <= batch < self.batches or not 0 <= rank < self.plan.world:
            raise IndexError(f"batch {batch} of {self.batches}, rank {rank} of {self.plan.world}")
        g, local = self.plan.batch_size, self.plan.local_batch
        if batch < self.full:
            start = batch * g + rank * local
            return start, start + local
        start = self.full * g + rank * self.tail_share
        return start, start + self.tail_share

    def rank_batch(self, batch: int, rank: int) -> np.ndarray:
        """The global ids rank `rank` reads in batch `batch`."""
        return self.positions(*self.span(batch, rank))

    def global_batch(self, batch: int) -> np.ndarray:
        """Every rank's share of batch `batch`, rank 0's first."""
        return self.positions(self.span(batch, 0)[0], self.span(batch, self.plan.world - 1)[1])

    def owners(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(rank, batch) reading each epoch position start .. stop - 1; rank -1 if dropped."""
        p = np.arange(start, stop, dtype=np.int64)
        g, local, n = self.plan.batch_size, self.plan.local_batch, self.plan.world
        rank = np.full(len(p), -1, dtype=np.int64)
        batch = np.minimum(p // g, self.full)
        body = p < self.full * g
        rank[body] = (p[body] % g) // local
        if self.tail_share:
            off = p - self.full * g
            kept = ~body & (off < self.tail_share * n)
            rank[kept] = off[kept] // self.tail_share
        return rank, batch

    def order(self) -> np.ndarray:
        """The whole epoch's order (every id once): for tests and small data sets."""
        return self.positions(0, self.total)


def required_bytes(
    shard_bytes: Sequence[int], rows_per_shard: Sequence[int], plan: OrderPlan
) -> int:
    """Bytes of shards that one rank's reader may need at once, in any epoch: the shards of
    every window that a global batch overlaps (a batch of G positions overlaps at most
    2 + (G - 2) // m windows, m the fewest rows a full window can hold), and never more than
    the whole data set."""
    sizes = np.sort(np.asarray(shard_bytes, dtype=np.int64))[::-1]
    rows = np.sort(np.asarray(rows_per_shard, dtype=np.int64))
    total = int(sizes.sum())
    if len(rows) <= plan.window:
        return total
    fewest = int(rows[: plan.window].sum())
    g = plan.batch_size
    windows = 1 if g == 1 else 2 + (g - 2) // fewest
    return min(total, windows * int(sizes[: plan.window].sum()))
