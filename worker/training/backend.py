"""The Backend protocol both frameworks implement, and a lazy lookup by framework name."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from app.schemas.job_spec import JobSpec
from worker.training.callbacks import Logs, TrainState
from worker.training.data import Splits


@dataclass
class TrainedEpoch:
    """What one pass over the training split produced."""

    logs: Logs  # "loss" (objective incl. L2) and "accuracy" or "mae", averaged over samples
    samples: int
    bad_step: int | None = None  # first step (1-based) whose loss was not finite
    # A streamed epoch's input (app.schemas.metric_row.INPUT_MEASURES; None for data held in
    # memory): waited for input, the largest over ranks; then, summed over ranks, bytes its
    # shard caches read from the store and shard uses they served (hits) or fetched (misses).
    data_wait_seconds: float | None = None
    data_read_bytes: int | None = None
    data_cache_hits: int | None = None
    data_cache_misses: int | None = None
    # An epoch resumed mid-way: the samples this attempt trained (the speed's); None: all.
    trained_samples: int | None = None


@dataclass
class Placement:
    """Where this process trains: its rank among the replicas and its devices."""

    replicas: int = 1
    rank: int = 0
    gpus: list[int] = field(default_factory=list)
    threads: int | None = None  # intra-op; None: the framework's default (a thread per core)
    interop_threads: int | None = None
    timeout_seconds: float = 120.0  # a collective waiting longer fails (EPOCHAL_COLLECTIVE_...)
    peers: tuple[str, ...] = ()  # a gang's nodes, HOST:PORT in node order; () on one node

    @property
    def is_main(self) -> bool:
        return self.rank == 0


class Backend(Protocol):
    """One framework's half of the loop; the loop itself lives once, in loop.fit."""

    is_main: bool

    def set_learning_rate(self, rate: float) -> None: ...

    def train_epoch(self, state: TrainState) -> TrainedEpoch | None:
        """One epoch over freshly shuffled samples; None when state.interrupt stopped it."""

    def end_training(self) -> None:
        """Training is over (every epoch done, or stopped): free what only train_epoch reads,
        a streamed data set's training stream and its cached shards, before the report and
        the export; a later train_epoch opens a new one."""

    def evaluate(self, split: str) -> Logs:
        """Loss and accuracy (or mae) over the whole split ("val" or "test")."""

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Logits (or values) [N, outputs] for normalized rows laid out as Splits holds them,
        in float32 from the float32 weights (no mixed precision, no TF32): the evaluation
        report and model.onnx's parity check both read this."""

    def get_weights(self) -> list[np.ndarray]:
        """All model variables in Keras layout (kernels [in, out]; conv [kh, kw, in, out])."""

    def set_weights(self, weights: list[np.ndarray]) -> None: ...
    def l2_penalty(self) -> float: ...
    def parameter_count(self) -> int: ...
    def topology(self) -> dict[str, int | str]:
        """`replicas` training in sync, as the framework counts them, and the `strategy`
        (single, ddp or mirrored) that keeps them in sync: the job's result reports both."""

    def save_checkpoint(self, directory: Path) -> None:
        """Model, optimizer and RNG state: enough for a fresh process to continue exactly."""

    def load_checkpoint(self, directory: Path) -> None: ...

    def export_model(self, directory: Path) -> Path:
        """Write the trained model in the framework's own format; return the file."""

    def agree(self, value: int) -> int:
        """The largest value any rank holds, on every rank (so no rank decides alone)."""

    def close(self, exiting: bool = False) -> None:
        """Leave the process group; free the framework's state unless the process ends now."""


BACKENDS = {
    "pytorch": "worker.training.torch.backend:TorchBackend",
    "tensorflow": "worker.training.tf.backend:TFBackend",
}


def create_backend(spec: JobSpec, splits: Splits, placement: Placement) -> Backend:
    """Import the framework's back-end only now, in the training process."""
    module_name, class_name = BACKENDS[spec.framework].split(":")
    backend_class = getattr(importlib.import_module(module_name), class_name)
    backend: Backend = backend_class(spec, splits, placement)
    return backend


def kernel_l2(weights: list[np.ndarray], kernel_flags: list[bool], l2: float) -> float:
    """The L2 contract, in numpy: l2 * sum(w**2) over kernels (not biases or norm scales)."""
    return l2 * float(
        sum(
            np.sum(np.square(w, dtype=np.float64))
            for w, k in zip(weights, kernel_flags, strict=True)
            if k
        )
    )
