"""The back-end's own small step, timed on a given number of intra-op threads, for
worker.calibration (which runs this once per count, each in a process of its own).

`python -m worker.training.tf.calibrate THREADS` prints the best epoch time of the seed's MLP
(784-128-64-10) at batch 32 on random data: the kind of step SHARED_STEP_FLOPS calls small.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from app.schemas.job_spec import JobSpec
from worker.training.backend import Placement
from worker.training.callbacks import TrainState
from worker.training.data import Splits
from worker.training.tf.backend import TFBackend
from worker.training.tf.strategy import use_threads

SAMPLES, FEATURES, CLASSES = 16384, 784, 10  # more than a CPU cache holds, as a real data set
EPOCHS = 20


def epoch_seconds(threads: int) -> float:
    """The best epoch time of the back-end's small step on `threads` intra-op threads."""
    use_threads(Placement(threads=threads, interop_threads=2))  # before the runtime starts
    rng = np.random.default_rng(0)
    x = rng.random((SAMPLES, FEATURES), dtype=np.float32)
    y = rng.integers(0, CLASSES, SAMPLES)
    splits = Splits(x, y, None, None, None, None, outputs=CLASSES)
    spec = JobSpec.model_validate(
        {
            "framework": "tensorflow",
            "dataset": {"name": "digits"},
            "model": {"type": "mlp", "hidden_units": [128, 64]},
            "training": {"epochs": EPOCHS, "batch_size": 32},
            "regularization": {"l2": 0.001},
        }
    )
    backend = TFBackend(spec, splits, Placement())  # no threads: the pools set above stay
    state = TrainState(epochs=EPOCHS, learning_rate=0.001)
    best = float("inf")
    for epoch in range(1, EPOCHS + 1):  # the first compiles
        state.epoch = epoch
        started = time.perf_counter()
        backend.train_epoch(state)
        best = min(best, time.perf_counter() - started)
    return best


if __name__ == "__main__":
    print(json.dumps({"threads": int(sys.argv[1]), "seconds": epoch_seconds(int(sys.argv[1]))}))
