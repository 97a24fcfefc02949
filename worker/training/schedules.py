"""Learning-rate schedules, computed once here for both back-ends.

The rate is set per epoch (as the seeds' StepLR): epoch index e counts from 0. The closed-form
schedules are pure functions; reduce-on-plateau keeps Keras' ReduceLROnPlateau state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from app.schemas.job_spec import (
    CosineLRSpec,
    ExponentialLRSpec,
    LRSchedulerSpec,
    ReduceOnPlateauSpec,
    StepLRSpec,
    resolved_mode,
)
from worker.training.callbacks import Callback, Logs, Monitor, TrainState


def epoch_rate(
    spec: LRSchedulerSpec | None, base_lr: float, epoch_index: int, epochs: int
) -> float:
    """The rate for epoch `epoch_index` (0-based) of a closed-form schedule."""
    if spec is None or isinstance(spec, ReduceOnPlateauSpec):
        return base_lr
    if isinstance(spec, StepLRSpec):  # torch.optim.lr_scheduler.StepLR
        return base_lr * spec.gamma ** (epoch_index // spec.step_size)
    if isinstance(spec, ExponentialLRSpec):  # torch.optim.lr_scheduler.ExponentialLR
        return base_lr * spec.gamma**epoch_index
    return _cosine(spec, base_lr, epoch_index, epochs)


def _cosine(spec: CosineLRSpec, base_lr: float, epoch_index: int, epochs: int) -> float:
    """Linear warmup to base_lr over warmup_epochs, then CosineAnnealingLR held at min_lr."""
    warmup = spec.warmup_epochs
    if epoch_index < warmup:  # LinearLR(start_factor=1/warmup, total_iters=warmup-1)
        return base_lr * (epoch_index + 1) / warmup
    t_max = spec.t_max or max(epochs - warmup, 1)
    t = min(epoch_index - warmup, t_max)
    return spec.min_lr + (base_lr - spec.min_lr) * (1 + math.cos(math.pi * t / t_max)) / 2


class ReduceOnPlateau:
    """keras.callbacks.ReduceLROnPlateau's bookkeeping, framework-free."""

    def __init__(self, spec: ReduceOnPlateauSpec) -> None:
        self.spec = spec
        self.monitor = Monitor(spec.monitor, resolved_mode(spec.monitor, spec.mode), spec.min_delta)
        self.best: float | None = None
        self.wait = self.cooldown_counter = 0

    def next_rate(self, current: float | None, rate: float) -> float:
        """Given this epoch's monitored value and rate, the rate for the next epoch."""
        if current is None:
            return rate
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor.is_improvement(current, self.best):
            self.best, self.wait = current, 0
        elif self.cooldown_counter <= 0:
            self.wait += 1
            if self.wait >= self.spec.patience and rate > np.float32(self.spec.min_lr):
                rate = max(rate * self.spec.factor, self.spec.min_lr)
                self.cooldown_counter, self.wait = self.spec.cooldown, 0
        return rate

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "wait": self.wait, "cooldown_counter": self.cooldown_counter}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.wait = state["best"], state["wait"]
        self.cooldown_counter = state["cooldown_counter"]


class LRSchedule(Callback):
    """Sets state.learning_rate before each epoch; the metrics row records it."""

    state_key = "lr_schedule"

    def __init__(self, spec: LRSchedulerSpec | None, base_lr: float) -> None:
        self.spec, self.base_lr = spec, base_lr
        self.plateau = ReduceOnPlateau(spec) if isinstance(spec, ReduceOnPlateauSpec) else None

    def on_epoch_begin(self, state: TrainState) -> None:
        if self.plateau is None:
            state.learning_rate = epoch_rate(self.spec, self.base_lr, state.epoch, state.epochs)

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        if self.plateau is not None:
            value = self.plateau.monitor.value(logs)
            state.learning_rate = self.plateau.next_rate(value, state.learning_rate)

    def state_dict(self) -> dict[str, Any]:
        return self.plateau.state_dict() if self.plateau else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.plateau is not None and state:
            self.plateau.load_state_dict(state)
