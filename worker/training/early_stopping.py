"""Early stopping with the exact semantics of Keras 3's EarlyStopping callback."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from app.domain.states import StopReason
from worker.training.callbacks import Callback, Logs, Monitor, TrainState

Weights = list[np.ndarray]


class EarlyStopping(Callback):
    """Stop when `monitor` has not improved by min_delta for `patience` epochs.

    Mirrors keras.callbacks.EarlyStopping line by line (Keras counts epochs from 0, so
    `epoch` below is state.epoch - 1): the first value always counts as an improvement, the
    wait only resets when the baseline is beaten too, and with restore_best_weights the best
    weights are put back at the end of training whether or not it stopped early.
    """

    state_key = "early_stopping"

    def __init__(
        self,
        monitor: Monitor,
        patience: int,
        *,
        baseline: float | None = None,
        start_from_epoch: int = 0,
        restore_best_weights: bool = False,
        get_weights: Callable[[], Weights] | None = None,
        set_weights: Callable[[Weights], None] | None = None,
    ) -> None:
        self.monitor, self.patience, self.baseline = monitor, patience, baseline
        self.start_from_epoch, self.restore_best_weights = start_from_epoch, restore_best_weights
        self.get_weights, self.set_weights = get_weights, set_weights
        self.wait, self.stopped_epoch, self.best_epoch = 0, 0, 0
        self.best: float | None = None
        self.best_weights: Weights | None = None

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        epoch = state.epoch - 1
        current = self.monitor.value(logs)
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights, self.best_epoch = self._snapshot(), epoch
        self.wait += 1
        if self.monitor.is_improvement(current, self.best):
            self.best, self.best_epoch = current, epoch
            if self.restore_best_weights:
                self.best_weights = self._snapshot()
            if self.baseline is None or self.monitor.is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            state.request_stop(
                StopReason.early_stopping,
                f"{self.monitor.monitor} did not improve by more than {self.monitor.min_delta} "
                f"for {self.wait} epochs; best epoch {self.best_epoch + 1}",
            )

    def on_train_end(self, state: TrainState, logs: Logs) -> None:
        if self.restore_best_weights and self.best_weights is not None and self.set_weights:
            self.set_weights(self.best_weights)
            state.restored_best_weights = True

    def _snapshot(self) -> Weights:
        assert self.get_weights is not None, "restore_best_weights needs get_weights"
        return [np.array(w, copy=True) for w in self.get_weights()]

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait": self.wait,
            "stopped_epoch": self.stopped_epoch,
            "best_epoch": self.best_epoch,
            "best": self.best,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.wait, self.stopped_epoch = state["wait"], state["stopped_epoch"]
        self.best_epoch, self.best = state["best_epoch"], state["best"]

    def save_arrays(self, directory: Path) -> None:
        if self.best_weights is not None:
            arrays = {f"w{i}": w for i, w in enumerate(self.best_weights)}
            np.savez(directory / "best_weights.npz", **arrays)  # type: ignore[arg-type]

    def load_arrays(self, directory: Path) -> None:
        path = directory / "best_weights.npz"
        if path.exists():
            with np.load(path, allow_pickle=False) as data:
                self.best_weights = [data[f"w{i}"] for i in range(len(data.files))]
