"""The learning-rate schedule of a job, as a callback: the same rates in both back-ends.

Each schedule's rule lives in its module (app/schemas/schedules/): a closed form sets the rate
before each epoch; one that reacts to a metric sets it after each epoch from its state, which
the checkpoint keeps, judging improvement with the Monitor early stopping uses (Keras' rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.schemas.monitor import resolved_mode
from app.schemas.schedules import Schedule
from worker.training.callbacks import Callback, Logs, Monitor, TrainState


def epoch_rate(spec: Schedule | None, base_lr: float, epoch_index: int, epochs: int) -> float:
    """The rate for epoch `epoch_index` (0-based): the schedule's closed form, else the base."""
    rate = None if spec is None else spec.epoch_rate(base_lr, epoch_index, epochs)
    return base_lr if rate is None else rate


def watch_monitor(spec: Schedule | None) -> Monitor | None:
    """The Monitor of the metric a schedule reacts to, or None."""
    watched = None if spec is None else spec.watches()
    if watched is None:
        return None
    monitor, mode, min_delta = watched
    return Monitor(monitor, resolved_mode(monitor, mode), min_delta)


class LRSchedule(Callback):
    """Sets state.learning_rate for each epoch; the metrics row records it."""

    state_key = "lr_schedule"

    def __init__(self, spec: Schedule | None, base_lr: float) -> None:
        self.spec, self.base_lr = spec, base_lr
        self.monitor = watch_monitor(spec)
        self.state: dict[str, Any] = spec.initial_state() if spec else {}

    def on_epoch_begin(self, state: TrainState) -> None:
        if self.spec is None:
            state.learning_rate = self.base_lr
            return
        rate = self.spec.epoch_rate(self.base_lr, state.epoch, state.epochs)
        if rate is not None:  # else: what the last epoch's end set
            state.learning_rate = rate

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        if self.spec is not None and self.monitor is not None:
            value = self.monitor.value(logs)
            state.learning_rate = self.spec.next_rate(
                self.state, value, state.learning_rate, self.monitor.is_improvement
            )

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            self.state.update(state)
