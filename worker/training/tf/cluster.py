"""A TensorFlow job over a gang's nodes: MultiWorkerMirroredStrategy from a TF_CONFIG, and the
two cross-node exchanges the loop needs (the largest value, and one node's bytes)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy

from worker.training.backend import Placement

TF_CONFIG_ENV = "TF_CONFIG"


def tf_config(placement: Placement) -> dict[str, Any]:
    """The cluster: a worker task per node at the HOST:PORT its seat published, in node order;
    this node's task index is its node rank (global rank over the replicas on each node)."""
    per_node = placement.replicas // len(placement.peers)
    return {
        "cluster": {"worker": list(placement.peers)},
        "task": {"type": "worker", "index": placement.rank // per_node},
    }


def multi_worker(placement: Placement) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy over the gang's nodes, one CPU replica each.

    EPOCHAL_COLLECTIVE_TIMEOUT_SECONDS, as far as TensorFlow lets it reach: each collective
    (gradients, losses, the stop agreement) raises DeadlineExceeded after waiting that long
    (TF runs a timer thread per collective for it), and so does the strategy's first wait for
    every node to be up (a private class setting: TF's default waits forever). TF's own peer
    health check (a probe every 30 s, 3 tries of 10 s) aborts collectives sooner when a node's
    server is gone, and is not tied to it.
    """
    os.environ[TF_CONFIG_ENV] = json.dumps(tf_config(placement))
    extended = collective_all_reduce_strategy.CollectiveAllReduceExtended
    extended._check_health_initial_timeout = math.ceil(placement.timeout_seconds)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=placement.timeout_seconds,
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def max_all(strategy: tf.distribute.Strategy, value: int) -> int:
    """The largest value any node holds, on every node: an all-gather of one number each
    (tf.distribute reduces only by SUM or MEAN)."""

    def gather() -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        return context.all_gather(tf.constant([value], tf.int64), axis=0)

    gathered = strategy.experimental_local_results(strategy.run(gather))[0]
    return int(tf.reduce_max(gathered))


def broadcast_bytes(strategy: tf.distribute.Strategy, payload: bytes, mine: bool) -> bytes:
    """The bytes of the one node where `mine` is true, on every node: a SUM of int32 words
    to which every other node adds zeros (exact), after agreeing on the length."""
    size = max_all(strategy, len(payload) if mine else 0)
    words = np.zeros(-(-size // 4), np.int32)
    if mine:
        words.view(np.uint8)[:size] = np.frombuffer(payload, np.uint8)
    local = tf.constant(words)
    summed = strategy.reduce("SUM", strategy.run(lambda: tf.identity(local)), axis=None)
    return np.asarray(summed.numpy(), np.int32).tobytes()[:size]
