"""A TensorFlow job over a gang's nodes: MultiWorkerMirroredStrategy from a TF_CONFIG, and the
cross-node exchanges the loop needs (the largest value, sums, leaving together)."""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

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
    (gradients, losses, the agreements) raises DeadlineExceeded after waiting that long (TF
    runs a timer thread per collective for it). TF's first wait for every node's server, in
    this constructor, is not bounded by it (nor by the coordination service's register
    timeout, tried: a node alone waited on): a node that never comes is ended by the gang's
    seat leases instead (worker.supervisor.gang_seat). A node gone later is also found by the
    coordination service's own heartbeats, which fail the others' collectives.
    """
    os.environ[TF_CONFIG_ENV] = json.dumps(tf_config(placement))
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=placement.timeout_seconds,
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


class Exchange:
    """The gang's cross-node exchanges, on every node: the largest value any node holds,
    numbers summed over the nodes, and a barrier. Each node makes the same calls in the same
    order (collectives match by order)."""

    def __init__(self, strategy: tf.distribute.Strategy, nodes: int) -> None:
        self.strategy, self.nodes = strategy, nodes
        # Traced once: run eagerly, strategy.run wraps and traces `gather` again at every call.
        self._gather = tf.function(self._all_gather)

    def _all_gather(self, value: tf.Tensor) -> tf.Tensor:
        def gather(local: tf.Tensor) -> tf.Tensor:
            # identity: a copy on the replica's device (a function's argument has none)
            return tf.distribute.get_replica_context().all_gather(tf.identity(local), axis=0)

        gathered = self.strategy.run(gather, args=(value,))
        return self.strategy.experimental_local_results(gathered)[0]

    def max_all(self, value: int) -> int:
        """An all-gather of one number each (tf.distribute reduces only by SUM or MEAN)."""
        return int(tf.reduce_max(self._gather(tf.constant([value], tf.int64))))

    def sum_all(self, values: list[int]) -> list[int]:
        """Each number summed over the nodes: an all-gather, which holds a node's numbers
        once per replica it drives (the same count on every node), so they are taken once."""
        gathered = self._gather(tf.constant(values, tf.int64)).numpy().reshape(-1, len(values))
        per_node = len(gathered) // self.nodes
        return [int(v) for v in gathered[::per_node].sum(axis=0)]

    def barrier(self) -> None:
        """Nodes leave together: node 0 may still be exporting the model when the others are
        done, and a node that exits stops answering the coordination service's heartbeats."""
        try:
            self.max_all(0)
        except tf.errors.OpError:  # a node is gone; its supervisor already ends the attempt
            pass
