"""Which tf.distribute strategy a job runs under, on how many threads, and how an epoch's
batches reach its replicas, from its placement."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import tensorflow as tf

from app.core.config import get_settings
from worker.calibration import measured_threads
from worker.training.backend import Placement
from worker.training.tf.cluster import multi_worker

# Forward FLOPs of one replica's step below which TensorFlow's CPU step may run faster on one
# intra-op thread than on several: its ops are too small to pay for handing out their shards
# on some CPUs, not on others (docs/benchmarks.md, "The worker"); which, the
# worker measures once per machine (worker.calibration). PyTorch's OpenMP pool gains from every
# core even at batch 8, so only this back-end has such a floor.
SHARED_STEP_FLOPS = 2**29


def make_strategy(placement: Placement, step_flops: int) -> tf.distribute.Strategy:
    """Default strategy for one replica; MirroredStrategy over GPUs or logical CPU devices;
    MultiWorkerMirroredStrategy over a gang's nodes (one CPU replica each).

    Logical CPU devices must exist before TensorFlow initializes its runtime, so this runs
    first thing in the back-end (and the training child is a fresh process, P14, P27).
    """
    use_threads(fitted_to_step(placement, step_flops))
    if placement.peers:
        return multi_worker(placement)
    if placement.replicas == 1:
        if placement.gpus:
            return tf.distribute.OneDeviceStrategy("/gpu:0")
        return tf.distribute.get_strategy()
    if placement.gpus:
        devices = [f"/gpu:{i}" for i in range(placement.replicas)]
    else:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(placement.replicas)]
        )
        devices = [f"/cpu:{i}" for i in range(placement.replicas)]
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=None if placement.gpus else tf.distribute.ReductionToOneDevice()
    )


def distribute_epoch(
    strategy: tf.distribute.Strategy, x: tf.Tensor, y: tf.Tensor, order: np.ndarray, batch: int
) -> tf.distribute.DistributedIterator:
    """The epoch's global batches, each cut into equal consecutive parts, part r to replica r:
    the same samples in the same order whether the replicas share one process or are a gang's
    nodes (each node's pipeline keeps only its own parts; one pipeline deals them round-robin
    to its devices), so the layout does not change the result."""
    per_replica = batch // strategy.num_replicas_in_sync
    parts = order[: len(order) // batch * batch].reshape(-1, per_replica)

    def pipeline(context: tf.distribute.InputContext) -> tf.data.Dataset:
        mine = parts[context.input_pipeline_id :: context.num_input_pipelines]
        return (
            tf.data.Dataset.from_tensor_slices(mine)
            .map(lambda idx: (tf.gather(x, idx), tf.gather(y, idx)))
            .prefetch(2)
        )

    return iter(strategy.distribute_datasets_from_function(pipeline))


def fitted_to_step(placement: Placement, step_flops: int) -> Placement:
    """The supervisor's threads, or, where a lone CPU replica's step is small
    (SHARED_STEP_FLOPS), the count measured fastest for such a step on this machine (one until
    measured). Several replicas keep theirs: their ops run side by side in the one pool."""
    alone = placement.replicas == 1 and not placement.gpus and not placement.peers
    if alone and placement.threads and step_flops < SHARED_STEP_FLOPS:
        measured = measured_threads(get_settings().resolved_cache_dir, placement.threads)
        return dataclasses.replace(placement, threads=measured or 1)
    return placement


def use_threads(placement: Placement) -> None:
    """The thread pools the supervisor chose (worker.supervisor.threads). Like logical
    devices they are fixed once the runtime starts: a second back-end in the same process
    (the in-process tests) keeps the first one's."""
    threading, counts = tf.config.threading, thread_counts()
    with contextlib.suppress(RuntimeError):
        if placement.threads and counts["intra_op_threads"] != placement.threads:
            threading.set_intra_op_parallelism_threads(placement.threads)
        if placement.interop_threads and counts["inter_op_threads"] != placement.interop_threads:
            threading.set_inter_op_parallelism_threads(placement.interop_threads)


def thread_counts() -> dict[str, int]:
    """The runtime's thread pools (0: TensorFlow's default, a thread per core)."""
    threading = tf.config.threading
    return {
        "intra_op_threads": threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": threading.get_inter_op_parallelism_threads(),
    }
