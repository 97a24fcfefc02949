"""What every training case returns, the data, the worker's loop run in-process, and the
options and table the benchmark modules share."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Collection, Sequence
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


def bench_parser(
    prog: str,
    tiny: str = "a few steps: checks it runs",
    quick: str | None = None,
    threads: int | None = None,
    timed: str | None = None,
) -> argparse.ArgumentParser:
    """The options a benchmark module's `main` shares: --tiny (its help `tiny`), and where
    given --quick (its help `quick`), --threads (default `threads`) and --cpu-time (what it
    times by the process's CPU: `timed`, "epochs" or "steps")."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--tiny", action="store_true", help=tiny)
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    if threads is not None:
        parser.add_argument("--threads", type=int, default=threads)
    if timed is not None:
        parser.add_argument(
            "--cpu-time", action="store_true", help=f"time {timed} by the process's CPU"
        )
    return parser


def print_aligned(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int]
) -> None:
    """`title` after a blank line, then the table: the header, a rule, the rows, in columns as
    wide as their widest cell; the columns in `right` (figures) aligned right, the rest left."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    for row in [header, ["-" * w for w in widths], *rows]:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in pairs]
        print("  ".join(cells).rstrip())
