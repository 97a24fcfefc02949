"""TensorFlow on a streamed data set: this node's batches from a ShardStream, one step a call.

One process drives a node's replicas, so a node is one rank of the epoch order (a gang's
node n of N takes slice n of each global batch) and its share is cut into equal consecutive
parts, part r to local replica r: the same global batches, split the same way, as the
in-memory path and the PyTorch back-end. The dropout seed generators are model variables, so
a checkpoint (epoch end or mid-epoch) carries their state and a resumed epoch draws what an
uninterrupted one draws. A mid-epoch checkpoint holds the next batch's position and the
epoch's loss and metric sums so far (global sums: every node holds the same).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from app.schemas.job_spec import JobSpec
from worker.training.backend import Backend, Placement, TrainedEpoch
from worker.training.callbacks import Logs, TrainState
from worker.training.data.stream import Batch, Position, ShardStream, input_counts
from worker.training.data.streamed import prepare_batch
from worker.training.data.types import StreamSource
from worker.training.loop import agree_on_interrupt

CHECK_EVERY = 32


class TFSteps(Backend, Protocol):
    """What a streamed epoch uses of worker.training.tf.backend.TFBackend (which imports
    this module, so it names the class's members rather than the class)."""

    spec: JobSpec
    placement: Placement
    strategy: tf.distribute.Strategy
    replicas: int
    classify: bool

    def _step(
        self, xb: tf.Tensor, yb: tf.Tensor, global_batch: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]: ...
    def _eval(self, xb: tf.Tensor, yb: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]: ...
    def _samples(self, x: np.ndarray) -> np.ndarray: ...
    def agree(self, value: int) -> int: ...
    def sum_all(self, values: list[int]) -> list[int]: ...


class StreamedTF:
    """The streamed epoch and evaluation of one TFBackend."""

    def __init__(self, backend: TFSteps, data: StreamSource, xla: bool) -> None:
        self.backend, self.data = backend, data
        placement = backend.placement
        self.nodes = max(1, len(placement.peers))
        self.node = placement.rank // max(1, placement.replicas // self.nodes)
        self.local = backend.replicas // self.nodes  # replicas this process drives
        self._stream: ShardStream | None = None
        self._single = tf.function(self._single_step, jit_compile=xla)
        self._mirrored = tf.function(self._mirrored_step)

    @property
    def stream(self) -> ShardStream:
        if self._stream is None:
            replicas = self.backend.replicas
            self._stream = self.data.train_stream(self.nodes, self.node, replicas)
        return self._stream

    def _single_step(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return self.backend._step(x, y, tf.shape(x)[0])

    def _mirrored_step(self, x: Any, y: Any) -> tuple[tf.Tensor, tf.Tensor]:
        strategy, batch = self.backend.strategy, tf.constant(self.backend.spec.training.batch_size)
        loss, metric = strategy.run(self.backend._step, args=(x, y, batch))
        return strategy.reduce("SUM", loss, axis=None), strategy.reduce("SUM", metric, axis=None)

    def _run(self, batch: Batch) -> tuple[float, float]:
        """One optimizer step on a batch: (its mean loss, its metric sum over all nodes)."""
        b = self.backend
        x = b._samples(prepare_batch(batch, self.data))
        y = batch.y.astype(np.int64 if b.classify else np.float32)
        if b.replicas == 1:
            loss, metric = self._single(tf.constant(x), tf.constant(y))
            return float(loss), float(metric)
        xs, ys = np.split(x, self.local), np.split(y, self.local)

        def part(arrays: list[np.ndarray]) -> Any:
            return b.strategy.experimental_distribute_values_from_function(
                lambda ctx: tf.constant(arrays[ctx.replica_id_in_sync_group % self.local])
            )

        loss, metric = self._mirrored(part(xs), part(ys))
        return float(loss), float(metric)

    def train_epoch(self, state: TrainState) -> TrainedEpoch | None:
        b, stream, epoch = self.backend, self.stream, state.epoch
        steps = stream.batches_per_epoch
        start, sums = self._resume(state)  # sums: loss (x samples), metric, samples
        before = sums[2]  # samples of a resumed epoch before its checkpoint
        earlier = stream.stats
        saved: dict[str, Any] = {}
        for batch in stream.iterate(Position(epoch, start), epoch + 1):
            step = batch.index
            if step % CHECK_EVERY == 0 and step > start and agree_on_interrupt(b, state):
                if state.step_checkpoint is not None and saved:  # a resumed attempt goes on here
                    state.step_checkpoint(state, partial(dict, saved), True)
                return None
            loss, metric = self._run(batch)
            if not math.isfinite(loss):
                return TrainedEpoch({"loss": loss}, 0, bad_step=step + 1)
            samples = len(batch.ids) * self.nodes
            sums = [sums[0] + loss * samples, sums[1] + metric, sums[2] + samples]
            state.global_step += 1
            state.steps_done(step + 1, steps)
            saved = {"position": batch.next_position.to_json(), "sums": list(sums)}
            if state.step_checkpoint is not None and step + 1 < steps:
                state.step_checkpoint(state, partial(dict, saved), False)
        now = stream.stats
        wait = b.agree(round((now.wait_seconds - earlier.wait_seconds) * 1e6)) / 1e6
        read, hits, misses = b.sum_all(input_counts(now, earlier))
        name = "accuracy" if b.classify else "mae"
        return TrainedEpoch(
            {"loss": sums[0] / sums[2], name: sums[1] / sums[2]},
            samples=int(sums[2]),
            trained_samples=int(sums[2] - before) if start else None,
            data_wait_seconds=wait,
            data_read_bytes=read,
            data_cache_hits=hits,
            data_cache_misses=misses,
        )

    @staticmethod
    def _resume(state: TrainState) -> tuple[int, list[float]]:
        saved, state.mid_epoch = state.mid_epoch, None
        if saved is None:
            return 0, [0.0, 0.0, 0.0]
        position = Position.from_json(saved["position"])
        if position.epoch != state.epoch:
            raise RuntimeError(f"a checkpoint of epoch {position.epoch + 1} for {state.epoch + 1}")
        return position.batch, [float(v) for v in saved["sums"]]

    def evaluate(self, split: str) -> Logs:
        """Every node scores the whole split (as the in-memory path does): no exchange."""
        b = self.backend
        loss_sum = metric_sum = 0.0
        for x, y in self.data.chunks(split, 0, 1):
            loss, metric = b._eval(tf.constant(b._samples(x)), tf.constant(y))
            loss_sum, metric_sum = loss_sum + float(loss), metric_sum + float(metric)
        rows = self.data.parts[split].rows
        name = "accuracy" if b.classify else "mae"
        return {"loss": loss_sum / rows, name: metric_sum / rows}

    def end_training(self) -> None:
        """Close the training stream, its cached shards with it (none opened: nothing to
        do); the next epoch, if any, opens a new one."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        self.end_training()
        self.data.close()
