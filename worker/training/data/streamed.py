"""A sharded data set (app.shards) as a job trains on it: streamed, never whole in memory.

The parts: the training split is global ids 0 .. train_rows - 1 of the data set's `train` part,
streamed in the epoch order (app.shards.order) by a ShardStream per rank; the validation split
is the last `validation_split` of those ids (held out by id, so it never enters the order:
ingest keeps a file's record order, so a file sorted by class should be shuffled first); the
`test` part, when the data set has one, is the official test split. Validation and test are
read in chunks, chunk k by rank k mod ranks, and scored as sums.

Normalization is today's (worker.training.data.splits.normalizer) with its statistics taken
from a seeded sample of at most STAT_SHARDS training shards and app.domain.stream_memory's
statistics_rows: every training sample for a small data set, a bounded read for a large one.
The reader's memory budget is app.domain.stream_memory's too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from app.core.config import get_settings
from app.domain.stream_memory import READER_SHARE, reader_bytes, statistics_rows
from app.domain.upload_rules import TOKEN_DTYPE
from app.schemas.augment import eval_steps
from app.schemas.job_spec import JobSpec
from app.shards.index import IndexMissing, ShardIndex, dataset_prefix, read_index
from app.shards.layout import ShardError
from app.shards.order import OrderPlan
from app.shards.reader import ShardReader
from app.storage.base import Store
from worker.training.data.augment import augment_batch
from worker.training.data.splits import normalizer
from worker.training.data.stream import Batch, ShardStream, required_ram_bytes
from worker.training.data.types import DataError, Splits, StreamSource

STAT_SHARDS = 4
SAMPLE_ROWS = 256  # prepared training rows kept in memory: the input's shape, ONNX parity
REPORT_ROWS = 10_000  # held-out rows the evaluation report (confusion matrix) is drawn from
EVAL_ROWS = 4096  # rows per chunk of a streamed evaluation


@dataclass
class Part:
    """One part of the data set in the store, and the ids of it a split uses."""

    prefix: str
    index: ShardIndex
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


class StreamedData:
    """What a back-end needs to train on a sharded data set: streams, chunks, normalization."""

    def __init__(self, spec: JobSpec, store: Store, train: ShardIndex, test: ShardIndex | None):
        ds, training = spec.dataset, spec.training
        self.store, self.index = store, train
        self.seed, self.batch_size, self.shuffle = (
            training.seed,
            training.batch_size,
            training.shuffle,
        )
        prefix = dataset_prefix(ds.id or "", "train")
        rows = min(train.rows, ds.limit or train.rows)
        held = int(round(rows * ds.validation_split))
        held = 1 if held == 0 and ds.validation_split > 0 else held
        if held >= rows:
            raise DataError("no training samples left after the validation split")
        self.parts = {"train": Part(prefix, train, 0, rows - held)}
        if held:
            self.parts["val"] = Part(prefix, train, rows - held, rows)
        if test is not None:
            tested = min(test.rows, ds.limit or test.rows)
            self.parts["test"] = Part(dataset_prefix(ds.id or "", "test"), test, 0, tested)
        self.ram_bytes = reader_bytes(get_settings(), ds.stream_ram_mb)
        self.scale, self.shift = self._statistics(ds.normalize)
        # Training batches take every augment step; held-out rows only the deterministic ones.
        self.train_steps = list(ds.augment)
        self.eval_steps = eval_steps(ds.augment, train.schema.x_shape)

    @property
    def train_rows(self) -> int:
        return self.parts["train"].rows

    def plan(self, world: int, replicas: int) -> OrderPlan:
        """The epoch order's plan for `world` streams feeding `replicas` replicas in all:
        with several replicas the tail that does not fill a global batch is dropped, as the
        in-memory path drops its partial last batch, so every replica's share is equal."""
        tail = "drop" if replicas > 1 else "split"
        return OrderPlan(self.seed, self.batch_size, world, shuffle=self.shuffle, tail=tail)

    def train_stream(self, world: int, rank: int, replicas: int) -> ShardStream:
        plan = self.plan(world, replicas)
        part = self.parts["train"]
        self.check_budget(plan)
        return ShardStream(
            self.store, part.prefix, plan, rank, ram_bytes=self.ram_bytes, index=part.index,
            rows=part.rows,
        )  # fmt: skip

    def check_budget(self, plan: OrderPlan) -> None:
        """DataError unless a reader of this plan fits the budget (one rank of one, whose
        batches are the largest, is checked when the data set is opened)."""
        part = self.parts["train"]
        needed = required_ram_bytes(part.index, plan, rows=part.rows)
        if needed > self.ram_bytes:
            raise DataError(
                f"streaming this data set needs {needed} bytes of reader memory (shards of up "
                f"to {part.index.max_shard_bytes} bytes, batches of {plan.local_batch}); the "
                f"limit is {self.ram_bytes} (EPOCHAL_STREAM_RAM_BYTES, dataset.stream_ram_mb, "
                f"or {READER_SHARE:.0%} of EPOCHAL_JOB_MEMORY_LIMIT_BYTES)"
            )

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """Stored rows as the model reads them: float32, (x - shift) / scale."""
        out = x.astype(np.float32)
        out -= self.shift
        out /= self.scale
        return out

    def prepare(self, x: np.ndarray, ids: np.ndarray, epoch: int) -> np.ndarray:
        """A training batch as the model reads it: normalized, then augmented by sample id."""
        out = self.normalize(x)
        if self.train_steps:
            out = augment_batch(out, ids, epoch, self.seed, self.train_steps)
        return out

    def held_out(self, x: np.ndarray) -> np.ndarray:
        """Held-out rows as the model reads them: normalized, the deterministic steps only."""
        out = self.normalize(x)
        if self.eval_steps:
            out = augment_batch(out, np.arange(len(out)), 0, self.seed, self.eval_steps)
        return out

    def chunks(self, split: str, rank: int, world: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Rank `rank`'s chunks of a held-out split, prepared: chunk k to rank k mod world."""
        part = self.parts[split]
        with self._reader(split) as reader:
            for k, start in enumerate(range(part.start, part.stop, EVAL_ROWS)):
                if k % world == rank:
                    x, y = reader.read_range(start, min(start + EVAL_ROWS, part.stop))
                    yield self.held_out(x), y

    def head(self, split: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The first `rows` samples of a split, prepared (a report's or a check's sample)."""
        x, y = self.raw_head(split, rows)
        return self.held_out(x), y

    def raw_head(self, split: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The first `rows` samples of a split as stored: what model.onnx is fed."""
        part = self.parts[split]
        with self._reader(split) as reader:
            return reader.read_range(part.start, min(part.start + rows, part.stop))

    @property
    def raw_shape(self) -> tuple[int, ...]:
        """One sample's shape as stored (before dataset.augment's steps)."""
        return tuple(self.index.schema.x_shape)

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """Each label's name, as the index keeps it (an image folder's folder names)."""
        return self.index.class_names

    @contextmanager
    def _reader(self, split: str) -> Iterator[ShardReader]:
        """A reader of a split's part for one pass, its shards dropped at the end: kept for
        the job, its cache (two shards) would sit beside the training stream's budget, which
        is all app.domain.stream_memory counts, for every epoch."""
        part = self.parts[split]
        cache = max(2 * part.index.max_shard_bytes, 1)
        reader = ShardReader(self.store, part.prefix, cache_bytes=cache, index=part.index)
        try:
            yield reader
        finally:
            reader.close()

    def _statistics(self, how: str) -> tuple[np.ndarray, np.ndarray]:
        part = self.parts["train"]
        rng = np.random.default_rng([self.seed, 5])
        rows = part.index.rows_per_shard
        shards = [s for s in range(len(rows)) if part.index.starts[s] < part.stop]
        chosen = sorted(rng.permutation(shards)[:STAT_SHARDS].tolist())
        ids = np.concatenate(
            [
                np.arange(part.index.starts[s], min(part.index.starts[s + 1], part.stop))
                for s in chosen
            ]
        )
        most = statistics_rows(int(np.prod(part.index.schema.x_shape)))
        if len(ids) > most:
            ids = np.sort(rng.choice(ids, most, replace=False))
        with self._reader("train") as reader:
            x, _ = reader.take(ids)
        return normalizer(x.astype(np.float32), None, how)

    def close(self) -> None:
        """Nothing to release: each read closes its reader (the streams are closed by their
        users)."""


def step_seed(seed: int, epoch: int, step: int, rank: int) -> int:
    """A seed for one step's random draws (dropout) on one rank: a resumed epoch redraws
    what an uninterrupted one drew, from any step on."""
    state = np.random.SeedSequence([seed, epoch, rank, 6, step]).generate_state(1, np.uint64)
    return int(state[0] % 2**63)


def prepare_batch(batch: Batch, data: StreamSource) -> np.ndarray:
    """A streamed training batch's x as the model reads it. The batch's ids and epoch travel
    with it, so a per-sample transform here is seeded by sample and epoch, not by position."""
    return data.prepare(batch.x, batch.ids, batch.epoch)


def open_streamed(spec: JobSpec, store: Store) -> StreamedData | None:
    """The sharded data set `dataset.id` names, or None when the store holds no index for it
    (an uploaded .npz, read whole)."""
    ds = spec.dataset
    if ds.id is None:
        return None
    try:
        train = read_index(store, dataset_prefix(ds.id, "train"))
    except IndexMissing:
        return None
    except ShardError as exc:
        raise DataError(f"data set {ds.id}: {exc}") from exc
    try:
        test = read_index(store, dataset_prefix(ds.id, "test"))
    except IndexMissing:
        test = None
    except ShardError as exc:
        raise DataError(f"data set {ds.id}, test part: {exc}") from exc
    _check_fits(spec, train, test)
    data = StreamedData(spec, store, train, test)
    try:
        data.check_budget(data.plan(1, 1))
    except DataError:
        data.close()
        raise
    return data


def _check_fits(spec: JobSpec, train: ShardIndex, test: ShardIndex | None) -> None:
    schema = train.schema
    if test is not None and test.schema != schema:
        raise DataError(f"data set {spec.dataset.id}: its test part's schema differs from train")
    if schema.x == TOKEN_DTYPE:
        raise DataError(f"data set {spec.dataset.id}: token ids stream only as uploads for now")
    if (schema.y_kind == "class") != (spec.task == "classification"):
        raise DataError(
            f"data set {spec.dataset.id} holds {schema.y_kind} labels; task is {spec.task}"
        )


def streamed_splits(data: StreamedData) -> Splits:
    """Splits for a streamed data set: a prepared sample of training rows (shape, checks),
    no held-out arrays (the back-end streams them), the normalization and the version."""
    x, y = data.head("train", SAMPLE_ROWS)
    index = data.index
    return Splits(
        x_train=x,
        y_train=y,
        x_val=None,
        y_val=None,
        x_test=None,
        y_test=None,
        outputs=index.classes or 1,
        scale=data.scale,
        shift=data.shift,
        fingerprint=f"{index.version}:{data.train_rows}",
        stream=data,
    )
