"""TensorFlow back-end: a GradientTape step, many steps per tf.function call.

Single device: the data set sits in memory as tensors and one XLA-compiled call runs a chunk of
steps (gather the batch, forward, tape, apply) — the levers behind Keras' fast `fit`
(steps_per_execution, jit_compile) in a custom loop. Several replicas: MirroredStrategy with
per-example losses averaged over the *global* batch and the L2 term scaled by the replica count,
so the summed replica gradients equal the one-device gradient (the seed's bug, P19/P20).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from app.domain.job_files import MODEL_FILES  # noqa: E402
from app.schemas.dataset_spec import model_input  # noqa: E402
from app.schemas.job_spec import JobSpec  # noqa: E402
from app.schemas.spec_graph import built_model  # noqa: E402
from worker.training.backend import Placement, TrainedEpoch  # noqa: E402
from worker.training.callbacks import Logs, TrainState  # noqa: E402
from worker.training.data import Splits, epoch_order, global_steps  # noqa: E402
from worker.training.init import initial_weights  # noqa: E402
from worker.training.loop import agree_on_interrupt  # noqa: E402
from worker.training.tf.cluster import Exchange  # noqa: E402
from worker.training.tf.graph import build_model  # noqa: E402
from worker.training.tf.optimizers import RegistryOptimizer  # noqa: E402
from worker.training.tf.strategy import distribute_epoch, make_strategy, thread_counts  # noqa: E402
from worker.training.tf.streamed import StreamedTF  # noqa: E402

CHUNK_STEPS = 64
POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
EVAL_BATCH = 8192
# A checkpoint's arrays: the model's weights (w0...), optimizer slots and seeds (v0...).
CHECKPOINT_FILE = "state.npz"
LEGACY_WEIGHTS = "model.weights.h5"


class TFBackend:
    """Implements worker.training.backend.Backend for TensorFlow / Keras 3."""

    def __init__(self, spec: JobSpec, splits: Splits, placement: Placement) -> None:
        # The graph is plain data (no op yet): its size tells how many threads its step uses.
        x = model_input(spec, splits.input_shape, splits.tokens, splits.vocab)
        self.graph = built_model(spec, x, splits.outputs)
        per_replica = spec.training.batch_size // max(1, placement.replicas)
        # First: logical devices and thread pools precede any op.
        self.strategy = make_strategy(placement, self.graph.flops_per_sample * per_replica)
        keras.utils.set_random_seed(spec.training.seed)
        # The policy is process-global: always set it, so no earlier job's choice leaks in.
        keras.mixed_precision.set_global_policy(POLICIES[spec.resources.precision])
        # One process drives every local replica; over a gang's nodes, node 0 alone writes.
        self.spec, self.placement, self.is_main = spec, placement, placement.is_main
        self.classify = spec.task == "classification"
        self.replicas = self.strategy.num_replicas_in_sync
        nodes = len(placement.peers)  # a gang's; none on one node
        self.exchange = Exchange(self.strategy, nodes) if nodes else None
        described = self.graph.variables()
        with self.strategy.scope():
            self.model, self.variables = build_model(self.graph)
            pairs = zip(self.variables, described, strict=True)
            multipliers = [(v, d.lr_multiplier) for v, d in pairs]
            self.optimizer = RegistryOptimizer(spec.optimizer, multipliers)
            # Build the optimizer's slots now, inside the scope: Keras 3.15 + TF 2.21 cannot
            # create them lazily inside a distributed step (RELIABILITY.md P23).
            self.optimizer.build(self.model.trainable_variables)
        self.kernels = [v for v, d in zip(self.variables, described, strict=True) if d.decays]
        self.set_weights(initial_weights(described, spec.training.seed))
        self.data = {
            split: (tf.constant(self._samples(x)), tf.constant(y))
            for split, x, y in (
                ("train", splits.x_train, splits.y_train),
                ("val", splits.x_val, splits.y_val),
                ("test", splits.x_test, splits.y_test),
            )
            if x is not None and y is not None
        }
        # XLA fuses the whole chunk on one device; under MirroredStrategy the step is traced
        # per replica by strategy.run instead. On CPU only where every op's XLA kernels pay.
        xla = self.replicas == 1 and (bool(placement.gpus) or self.graph.xla_on_cpu)
        self._chunk = tf.function(self._chunk_single, jit_compile=xla)
        self._mirrored_chunk = tf.function(self._chunk_mirrored)
        self._eval = tf.function(self._eval_batch)
        self.streamed = StreamedTF(self, splits.stream, xla) if splits.stream else None

    # -- the step -------------------------------------------------------------------------
    def _per_example(self, y: tf.Tensor, out: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(per-example loss, per-example metric): CE from logits / correct, or SE / abs err."""
        out = tf.cast(out, tf.float32)
        if self.classify:
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=out)
            correct = tf.cast(tf.equal(tf.argmax(out, axis=1, output_type=y.dtype), y), tf.float32)
            return loss, correct
        pred = tf.squeeze(out, axis=-1)
        return tf.square(pred - y), tf.abs(pred - y)

    def _l2_term(self) -> tf.Tensor:
        l2 = self.spec.regularization.l2
        return l2 * tf.add_n(
            [tf.reduce_sum(tf.square(tf.cast(k, tf.float32))) for k in self.kernels]
        )

    def _step(
        self, xb: tf.Tensor, yb: tf.Tensor, global_batch: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """One optimizer step on this replica's part of a global batch."""
        with tf.GradientTape() as tape:
            per_example, metric = self._per_example(yb, self.model(xb, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            if self.spec.regularization.l2 > 0:
                loss += tf.nn.scale_regularization_loss(self._l2_term())
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss, tf.reduce_sum(metric)

    def _chunk_single(
        self, x: tf.Tensor, y: tf.Tensor, idx: tf.Tensor, steps: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The first `steps` rows of idx [CHUNK_STEPS, batch] as steps, in one call.

        idx has one fixed shape (the last chunk of an epoch is padded) and the step count is a
        tensor, so XLA compiles the chunk once per job, not once per distinct chunk length.
        Returns per-step losses (zero past `steps`) and the metric sum.
        """
        losses = tf.TensorArray(tf.float32, size=idx.shape[0])
        metric_sum = tf.constant(0.0)
        for i in tf.range(steps):
            batch_idx = idx[i]
            loss, metric = self._step(
                tf.gather(x, batch_idx), tf.gather(y, batch_idx), tf.shape(batch_idx)[0]
            )
            losses = losses.write(i, loss)
            metric_sum += metric
        return losses.stack(), metric_sum

    def _chunk_mirrored(
        self, iterator: tf.distribute.DistributedIterator, steps: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        losses = tf.TensorArray(tf.float32, size=steps)
        metric_sum = tf.constant(0.0)
        batch = tf.constant(self.spec.training.batch_size)
        for i in tf.range(steps):
            xb, yb = next(iterator)
            loss, metric = self.strategy.run(self._step, args=(xb, yb, batch))
            losses = losses.write(i, self.strategy.reduce("SUM", loss, axis=None))
            metric_sum += self.strategy.reduce("SUM", metric, axis=None)
        return losses.stack(), metric_sum

    # -- an epoch -------------------------------------------------------------------------
    def set_learning_rate(self, rate: float) -> None:
        self.optimizer.learning_rate.assign(rate)

    def train_epoch(self, state: TrainState) -> TrainedEpoch | None:
        if self.streamed is not None:
            return self.streamed.train_epoch(state)
        x, y = self.data["train"]
        batch, samples = self.spec.training.batch_size, int(x.shape[0])
        steps = global_steps(samples, batch, self.replicas)
        order = epoch_order(
            samples, self.spec.training.seed, state.epoch, self.spec.training.shuffle
        )
        order = order[: steps * batch].astype(np.int32)
        chunks = (
            self._mirrored_chunks(x, y, order, steps)
            if self.replicas > 1
            else self._single_chunks(x, y, order, steps)
        )
        done, loss_sum, metric_sum = 0, 0.0, 0.0
        for losses, metric in chunks:
            losses = losses.numpy()
            sizes = np.minimum(batch, len(order) - batch * np.arange(done, done + len(losses)))
            if not np.isfinite(losses).all():
                bad = int(np.argmin(np.isfinite(losses)))
                return TrainedEpoch({"loss": float(losses[bad])}, 0, bad_step=done + bad + 1)
            loss_sum += float(np.dot(losses, sizes))
            metric_sum += float(metric)
            done += len(losses)
            state.steps_done(done, steps)
            if done < steps and agree_on_interrupt(self, state):  # a gang's nodes stop alike
                return None
        state.global_step += steps
        seen = min(steps * batch, len(order))
        name = "accuracy" if self.classify else "mae"
        return TrainedEpoch({"loss": loss_sum / seen, name: metric_sum / seen}, samples=seen)

    def end_training(self) -> None:
        if self.streamed is not None:
            self.streamed.end_training()

    def _single_chunks(
        self, x: tf.Tensor, y: tf.Tensor, order: np.ndarray, steps: int
    ) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        batch = self.spec.training.batch_size
        full = len(order) // batch
        grid = np.zeros((-(-full // CHUNK_STEPS) * CHUNK_STEPS, batch), np.int32)
        grid[:full] = order[: full * batch].reshape(full, batch)
        for begin in range(0, full, CHUNK_STEPS):
            count = min(CHUNK_STEPS, full - begin)
            losses, metric = self._chunk(
                x, y, tf.constant(grid[begin : begin + CHUNK_STEPS]), tf.constant(count)
            )
            yield losses[:count], metric
        if full < steps:  # the partial last batch: one more (small) compiled shape
            yield self._chunk(x, y, tf.constant(order[full * batch :][None, :]), tf.constant(1))

    def _mirrored_chunks(
        self, x: tf.Tensor, y: tf.Tensor, order: np.ndarray, steps: int
    ) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
        iterator = distribute_epoch(self.strategy, x, y, order, self.spec.training.batch_size)
        for begin in range(0, steps, CHUNK_STEPS):
            yield self._mirrored_chunk(iterator, tf.constant(min(CHUNK_STEPS, steps - begin)))

    def _eval_batch(self, xb: tf.Tensor, yb: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        loss, metric = self._per_example(yb, self.model(xb, training=False))
        return tf.reduce_sum(loss), tf.reduce_sum(metric)

    def evaluate(self, split: str) -> Logs:
        if self.streamed is not None:
            return self.streamed.evaluate(split)
        x, y = self.data[split]
        total, loss_sum, metric_sum = int(x.shape[0]), 0.0, 0.0
        for begin in range(0, total, EVAL_BATCH):
            loss, metric = self._eval(x[begin : begin + EVAL_BATCH], y[begin : begin + EVAL_BATCH])
            loss_sum, metric_sum = loss_sum + float(loss), metric_sum + float(metric)
        name = "accuracy" if self.classify else "mae"
        return {"loss": loss_sum / total, name: metric_sum / total}

    def _samples(self, x: np.ndarray) -> np.ndarray:
        """Samples as the graph reads them ((H, W) images gain their channel axis): a view."""
        return x.reshape(len(x), *self.graph.input.shape)

    def predict(self, x: np.ndarray) -> np.ndarray:
        model = self._float32_model()
        x = self._samples(x)
        tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:
            return np.concatenate(
                [
                    np.asarray(model(tf.constant(x[b : b + EVAL_BATCH]), training=False))
                    for b in range(0, len(x), EVAL_BATCH)
                ]
            ).astype(np.float32)
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(tf32)

    def _float32_model(self) -> keras.Model:
        """The model itself in fp32; under a mixed policy, a float32 twin with its weights."""
        if self.spec.resources.precision == "fp32":
            return self.model
        keras.mixed_precision.set_global_policy("float32")
        try:
            twin, variables = build_model(self.graph)
        finally:
            keras.mixed_precision.set_global_policy(POLICIES[self.spec.resources.precision])
        for variable, value in zip(variables, self.get_weights(), strict=True):
            variable.assign(value)
        return twin

    # -- state ----------------------------------------------------------------------------
    def get_weights(self) -> list[np.ndarray]:
        return [np.asarray(v.numpy(), dtype=np.float32) for v in self.variables]

    def set_weights(self, weights: list[np.ndarray]) -> None:
        for variable, value in zip(self.variables, weights, strict=True):
            variable.assign(value)

    def l2_penalty(self) -> float:
        return float(self._l2_term())

    def parameter_count(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.model.trainable_variables))

    def topology(self) -> dict[str, int | str]:
        strategy = "mirrored" if self.replicas > 1 else "single"  # over nodes too (MWMS)
        return {"replicas": self.replicas, "strategy": strategy, **thread_counts()}

    def _extra_state(self) -> list[tf.Variable]:
        """Optimizer slots and the dropout seed generators (in model.variables, not weights)."""
        weights = {id(w) for w in self.model.weights}
        seeds = [v for v in self.model.variables if id(v) not in weights]
        return [*self.optimizer.variables, *seeds]

    def save_checkpoint(self, directory: Path) -> None:
        """Weights and state as arrays in one file: Keras' .weights.h5 writer walks the model's
        layers and writes an HDF5 group and dataset per variable, a fixed cost per variable that
        outweighs a small model's bytes, paid every epoch (figures: docs/benchmarks.md)."""
        weights = {f"w{i}": np.asarray(w.numpy()) for i, w in enumerate(self.model.weights)}
        state = {f"v{i}": np.asarray(v.numpy()) for i, v in enumerate(self._extra_state())}
        np.savez(directory / CHECKPOINT_FILE, **weights, **state)  # type: ignore[arg-type]

    def load_checkpoint(self, directory: Path) -> None:
        legacy = directory / LEGACY_WEIGHTS  # a checkpoint from before the one-file layout
        if legacy.exists():
            self.model.load_weights(legacy)
        with np.load(directory / CHECKPOINT_FILE, allow_pickle=False) as saved:
            if not legacy.exists():
                for i, weight in enumerate(self.model.weights):
                    weight.assign(saved[f"w{i}"])
            for i, variable in enumerate(self._extra_state()):
                variable.assign(saved[f"v{i}"])

    def export_model(self, directory: Path) -> Path:
        path = directory / MODEL_FILES["tensorflow"]
        self.model.save(path)
        return path

    def agree(self, value: int) -> int:  # one process drives every replica on one node
        return self.exchange.max_all(value) if self.exchange else value

    def sum_all(self, values: list[int]) -> list[int]:
        """Each of this node's numbers summed over the gang's nodes (a node's own alone)."""
        return self.exchange.sum_all(values) if self.exchange else values

    def close(self, exiting: bool = False) -> None:
        if self.streamed is not None:
            self.streamed.close()
        if self.exchange is not None:
            self.exchange.barrier()
        if not exiting:  # work that a training process about to exit need not do
            keras.backend.clear_session()


def preload() -> None:
    """Nothing TensorFlow would do lazily can run before a job: logical devices for a
    MirroredStrategy must be set before the runtime starts. Importing is the warm-up."""
