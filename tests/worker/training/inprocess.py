"""Run a job spec in this process through the worker's own attempt code, without a database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.schemas.job_spec import JobSpec
from app.storage.base import Store
from worker.child.train_attempt import run_attempt
from worker.protocol import Outcome
from worker.training.backend import Backend, Placement, create_backend
from worker.training.callbacks import Callback, EpochLog, Logs, TrainState
from worker.training.checkpoint_upload import StoreCheckpoints
from worker.training.data import load_splits

EMPTY_DATA_DIR = Path("/nonexistent-epochal-data")  # built-ins come from /usr/share/datasets


class Killed(Exception):
    """Stands in for a SIGKILL between two epochs."""


class AtStep(Callback):
    """Runs `act` after global step `step`, once its checkpoint (if one was due) is written:
    wraps the Checkpointer's step hook, once."""

    def __init__(self, step: int) -> None:
        self.step = step

    def act(self, state: TrainState) -> None:
        raise NotImplementedError

    def on_epoch_begin(self, state: TrainState) -> None:
        # The Checkpointer set its hook when training began; this one wraps it, once.
        inner = state.step_checkpoint
        if inner is None or getattr(inner, "wrapped_by", None) is self:
            return

        def hook(s: TrainState, mid_epoch: Any, now: bool) -> None:
            inner(s, mid_epoch, now)
            if s.global_step == self.step:
                self.act(s)

        hook.wrapped_by = self  # type: ignore[attr-defined]
        state.step_checkpoint = hook


class KillAtStep(AtStep):
    """After global step `step` (its checkpoint, if one was due, written), `die()`: by default
    raise Killed; a rank run as its own process passes a real SIGKILL."""

    def __init__(self, step: int, die: Callable[[], None] | None = None) -> None:
        super().__init__(step)
        self.die = die or self._raise

    def _raise(self) -> None:
        raise Killed(f"killed after step {self.step}")

    def act(self, state: TrainState) -> None:
        self.die()


class KillBefore(Callback):
    """Dies when epoch `epoch` is about to start (after epoch-1's checkpoint was written)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_begin(self, state: TrainState) -> None:
        if state.epoch + 1 == self.epoch:
            raise Killed(f"killed before epoch {self.epoch}")


@dataclass
class Run:
    outcome: Outcome
    rows: list[Logs]
    weights: list[np.ndarray]
    state: TrainState


def make_spec(framework: str, **fields: Any) -> JobSpec:
    """A small digits job unless fields say otherwise."""
    body: dict[str, Any] = {"framework": framework, "dataset": {"name": "digits"}} | fields
    return JobSpec.model_validate(body)


@contextmanager
def backend_for(spec: JobSpec, placement: Placement | None = None) -> Iterator[Backend]:
    backend = create_backend(spec, load_splits(spec, EMPTY_DATA_DIR), placement or Placement())
    try:
        yield backend
    finally:
        backend.close()


def run_spec(
    spec: JobSpec,
    workdir: Path,
    *extra: Callback,
    data_dir: Path = EMPTY_DATA_DIR,
    store: StoreCheckpoints | None = None,
    data_store: Store | None = None,
    placement: Placement | None = None,
) -> Run:
    """One attempt (resuming from workdir's checkpoint if there is one), as a job's child runs;
    uploads are read from data_dir, sharded data sets from data_store (default the service's
    store); with `store`, checkpoints and the model go there too."""
    splits = load_splits(spec, data_dir, data_store)
    backend = create_backend(spec, splits, placement or Placement())
    try:
        log = EpochLog()
        state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
        outcome = run_attempt(
            spec, workdir, backend, splits, state, [log, *extra], job_id=None, store=store
        )
        return Run(outcome, log.rows, backend.get_weights(), state)
    finally:
        backend.close()
