"""`python -m tests.worker.training.replica_step FRAMEWORK REPLICAS RANK OUT.npz`

Trains one epoch of two global batches from fixed weights with REPLICAS replicas (this process
is rank RANK of a DDP group, or drives every replica of a MirroredStrategy, or with
EPOCHAL_GANG_PEERS set is node RANK of a TensorFlow gang, one replica per node) and writes the
weights, the epoch's loss and the validation metrics. A fresh process per run: TensorFlow's
logical CPU devices must be configured before it initializes, and DDP ranks are processes.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from tests.worker.training.inprocess import backend_for, make_spec
from worker.child.launch import exit_now
from worker.protocol import GANG_PEERS_ENV
from worker.training.backend import Backend, Placement
from worker.training.callbacks import TrainState

RATE = 0.1
FIELDS = {
    # 171 samples: 43 for validation (odd, so ranks score unequal shares), 128 = 2 x 64 to train
    "dataset": {"name": "digits", "limit": 171, "validation_split": 0.25},
    "training": {"epochs": 1, "batch_size": 64},
    # Stateful (a momentum slot per variable: RELIABILITY.md P23) and, unlike Adam, sensitive to
    # the scale of the gradient, which is what wrong loss scaling gets wrong (P19, P20).
    "optimizer": {"name": "sgd", "learning_rate": RATE, "momentum": 0.9},
    "regularization": {"l2": 0.01},  # must not be counted once per replica (P20)
    # A node at its own rate: the per-variable rates must hold on every replica and rank.
    "model": {
        "type": "graph",
        "layers": [
            {"name": "flat", "op": "flatten"},
            {"name": "d1", "op": "dense", "units": 32, "lr_multiplier": 0.5},
            {"name": "a1", "op": "activation", "fn": "relu"},
            {"name": "d2", "op": "dense", "units": 16},
            {"name": "a2", "op": "activation", "fn": "relu"},
        ],
    },
}


def fixed_weights(like: list[np.ndarray]) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [rng.normal(0.0, 0.2, size=w.shape).astype(np.float32) for w in like]


def exchange(backend: Backend, rank: int, nodes: int) -> None:
    """A gang's cross-node exchanges: the largest value and the sums of numbers (a streamed
    epoch's input counts). No bytes go node to node: a checkpoint comes from the store."""
    assert backend.agree(rank) == nodes - 1
    summed = backend.sum_all([rank + 1, 2**40, 7])  # type: ignore[attr-defined]
    assert summed == [nodes * (nodes + 1) // 2, nodes * 2**40, 7 * nodes], summed
    assert not hasattr(backend, "broadcast")


def main(framework: str, replicas: int, rank: int, out: str) -> None:
    peers = tuple(p for p in os.environ.get(GANG_PEERS_ENV, "").split(",") if p)
    resources = {"replicas": 1, "nodes": len(peers)} if peers else {"replicas": replicas}
    spec = make_spec(framework, **FIELDS, resources=resources)
    threads = 1 if framework == "pytorch" or peers else None  # two ranks on two cores
    placement = Placement(replicas=replicas, rank=rank, threads=threads, peers=peers)
    with backend_for(spec, placement) as backend:
        if peers:
            exchange(backend, rank, len(peers))
        backend.set_weights(fixed_weights(backend.get_weights()))
        backend.set_learning_rate(RATE)
        trained = backend.train_epoch(TrainState(epochs=1, learning_rate=RATE))
        assert trained is not None
        val = backend.evaluate("val")
        if backend.is_main:
            arrays = {f"w{i}": w for i, w in enumerate(backend.get_weights())}
            scores = [trained.logs["loss"], trained.samples, val["loss"], val["accuracy"]]
            np.savez(out, scores=np.array(scores), **arrays)  # type: ignore[arg-type]


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    exit_now(0)  # as a training child leaves: no teardown of gloo's threads (it can abort)
