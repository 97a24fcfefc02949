"""Keras-style callbacks: they see a TrainState and a dict of floats, and stop via a flag.

The monitor/mode/min_delta comparison is written once (Monitor) and shared by early stopping,
best-epoch tracking and reduce-on-plateau, with Keras 3.15's exact semantics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from app.domain.states import StopReason
from app.schemas.metric_row import monitored

Logs = dict[str, float]
# (state, the mid-epoch JSON when asked, now: at an interrupt, due or not)
StepCheckpoint = Callable[["TrainState", Callable[[], dict[str, Any]], bool], None]


@dataclass
class TrainState:
    """The only mutable object callbacks touch. `epoch` counts finished epochs (1-based)."""

    epochs: int
    learning_rate: float
    epoch: int = 0
    global_step: int = 0
    should_stop: bool = False
    stop_reason: StopReason | None = None
    stop_detail: str | None = None
    best_epoch: int | None = None
    best_value: float | None = None
    restored_best_weights: bool = False
    interrupt: StopReason | None = field(default=None, repr=False)  # a signal: stop mid-epoch
    # (epoch in progress, its steps done, its steps): one tuple, so a reader in another thread
    # (worker.child.progress) never sees one epoch's steps with another's number.
    step_progress: tuple[int, int, int] | None = field(default=None, repr=False)

    # A streamed epoch's state after its last step done, as JSON (position, sums so far):
    # set by a restored mid-epoch checkpoint, taken by the back-end's next epoch.
    mid_epoch: dict[str, Any] | None = field(default=None, repr=False)
    # Called by a streamed epoch after each optimizer step, and when an interrupt stops it
    # (now=True), with that JSON: the Checkpointer's mid-epoch save; None: none.
    step_checkpoint: StepCheckpoint | None = field(default=None, repr=False)

    def steps_done(self, step: int, steps: int) -> None:
        """A back-end's note, as its epoch goes: `step` of its `steps` steps are done."""
        self.step_progress = (self.epoch + 1, step, steps)

    def request_stop(self, reason: StopReason, detail: str | None = None) -> None:
        """Ask the loop to stop after this epoch; the first reason given wins."""
        if not self.should_stop:
            self.should_stop, self.stop_reason, self.stop_detail = True, reason, detail


class Callback:
    """No-op hooks; override what you need. State survives a resume via state_dict."""

    state_key: ClassVar[str] = ""

    def on_train_begin(self, state: TrainState) -> None: ...
    def on_epoch_begin(self, state: TrainState) -> None: ...
    def on_epoch_end(self, state: TrainState, logs: Logs) -> None: ...
    def on_train_end(self, state: TrainState, logs: Logs) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def save_arrays(self, directory: Path) -> None:
        """Write large state (weights) beside the checkpoint; JSON state goes in state_dict."""

    def load_arrays(self, directory: Path) -> None: ...


class CallbackList(Callback):
    """Calls each callback in order."""

    def __init__(self, callbacks: Iterable[Callback]) -> None:
        self.callbacks = list(callbacks)

    def on_train_begin(self, state: TrainState) -> None:
        for cb in self.callbacks:
            cb.on_train_begin(state)

    def on_epoch_begin(self, state: TrainState) -> None:
        for cb in self.callbacks:
            cb.on_epoch_begin(state)

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        for cb in self.callbacks:
            cb.on_epoch_end(state, logs)

    def on_train_end(self, state: TrainState, logs: Logs) -> None:
        for cb in self.callbacks:
            cb.on_train_end(state, logs)

    def stateful(self) -> list[Callback]:
        return [cb for cb in self.callbacks if cb.state_key]


class Monitor:
    """Keras' MonitorCallback comparison: is `value` better than `reference` by min_delta?

    `monitor` is the spec's name (what messages say); it watches that metrics-row field."""

    def __init__(self, monitor: str, mode: Literal["min", "max"], min_delta: float = 0.0) -> None:
        self.monitor, self.mode, self.min_delta = monitor, mode, abs(min_delta)
        self.field = monitored(monitor)

    def value(self, logs: Mapping[str, float]) -> float | None:
        value = logs.get(self.field)
        return None if value is None else float(value)

    def is_improvement(self, value: float, reference: float | None) -> bool:
        if reference is None:
            return True
        if self.mode == "min":
            return value + self.min_delta < reference
        return value - self.min_delta > reference


class BestEpoch(Callback):
    """Tracks the best epoch by a monitor (early stopping's, else val_loss or train_loss)."""

    state_key = "best_epoch"

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        value = self.monitor.value(logs)
        if value is None or not math.isfinite(value):
            return
        if state.best_value is None or self.monitor.is_improvement(value, state.best_value):
            state.best_epoch, state.best_value = state.epoch, value

    def state_dict(self) -> dict[str, Any]:
        return {}


class EpochLog(Callback):
    """Keeps each epoch's logs in memory: the metrics row, for tests and benchmarks."""

    def __init__(self) -> None:
        self.rows: list[Logs] = []

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        self.rows.append({"epoch": float(state.epoch), **logs})
