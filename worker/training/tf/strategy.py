"""Which tf.distribute strategy a job runs under, chosen from its placement."""

from __future__ import annotations

import tensorflow as tf

from worker.training.backend import Placement


def make_strategy(placement: Placement) -> tf.distribute.Strategy:
    """Default strategy for one replica; MirroredStrategy over GPUs or logical CPU devices.

    Logical CPU devices must exist before TensorFlow initializes its runtime, so this runs
    first thing in the back-end (and the training child is a fresh process, P14, P27).
    """
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
