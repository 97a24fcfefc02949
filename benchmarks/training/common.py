"""What every training case returns, the data, and the worker's loop run in-process."""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from worker.training.data.idx import find_idx, read_idx

DATA_DIR = Path(tempfile.gettempdir()) / "epochal-bench-data"  # empty: the system copy is used
SAMPLES = 60_000


@dataclass
class EpochTimes:
    """Seconds of training per epoch (no evaluation), samples per epoch, accuracy reached."""

    seconds: list[float]
    samples: int
    accuracy: float

    @property
    def samples_per_second(self) -> float:
        """Median over epochs after the first (which pays tracing / compilation)."""
        steady = self.seconds[1:] or self.seconds
        return self.samples / median(steady)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "samples_per_second": self.samples_per_second}


def fashion_arrays() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Fashion-MNIST as uint8 images and int64 labels, the way keras.datasets returns them."""
    files = find_idx("fashion_mnist", DATA_DIR)
    arrays = {key: read_idx(path) for key, path in files.items()}
    train = arrays["train/train-images-idx3-ubyte"], arrays["train/train-labels-idx1-ubyte"]
    test = arrays["test/t10k-images-idx3-ubyte"], arrays["test/t10k-labels-idx1-ubyte"]
    return (train[0], train[1].astype(np.int64)), (test[0], test[1].astype(np.int64))


def seed_equivalent_spec(framework: str, epochs: int) -> dict[str, Any]:
    """The job spec that expresses the seed of `framework`: same model, batch and optimizer.

    validation_split 0: the seeds train on all 60,000 images; accuracy is on the test split.
    """
    common = {
        "framework": framework,
        "dataset": {"name": "fashion_mnist", "validation_split": 0.0},
        "optimizer": {"name": "adam", "learning_rate": 0.001},
    }
    if framework == "pytorch":
        return common | {
            "model": {"type": "mlp", "hidden_units": [128]},
            "training": {"epochs": epochs, "batch_size": 64},
        }
    return common | {
        "model": {"type": "mlp", "hidden_units": [128, 64]},
        "training": {"epochs": epochs, "batch_size": 32},
        "regularization": {"l2": 0.001},
    }


def engine(body: dict[str, Any], gpus: list[int] | None = None) -> EpochTimes:
    """The worker's own attempt (run_attempt: loop, callbacks, checkpoints), no database."""
    from app.schemas.job_spec import JobSpec
    from worker.child.train_attempt import run_attempt
    from worker.training.backend import Placement, create_backend
    from worker.training.callbacks import EpochLog, TrainState
    from worker.training.data import load_splits

    spec = JobSpec.model_validate(body)
    splits = load_splits(spec, DATA_DIR)
    backend = create_backend(spec, splits, Placement(gpus=gpus or []))
    log = EpochLog()
    with tempfile.TemporaryDirectory() as workdir:
        state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
        outcome = run_attempt(spec, Path(workdir), backend, splits, state, [log])
    backend.close()
    samples = len(splits.x_train)
    seconds = [samples / row["samples_per_second"] for row in log.rows]
    return EpochTimes(seconds, samples, float(outcome.result["test_accuracy"]))
