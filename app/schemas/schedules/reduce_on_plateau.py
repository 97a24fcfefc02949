"""reduce_on_plateau: keras.callbacks.ReduceLROnPlateau's rule, framework-free."""

from __future__ import annotations

import struct
from typing import Any, Literal

from pydantic import Field

from app.schemas.monitor import Mode
from app.schemas.schedules.base import Better, Schedule


def _float32(x: float) -> float:
    """x rounded to float32, as Keras compares the rate with np.float32(min_lr)."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


class ReduceOnPlateauSpec(Schedule):
    """Multiply the rate by factor after `patience` epochs without improvement of monitor."""

    name: Literal["reduce_on_plateau"] = "reduce_on_plateau"
    monitor: str = Field(
        "val_loss", max_length=32, description="the metric watched, e.g. val_loss or val_accuracy"
    )
    mode: Mode = Field("auto", description="min, max, or auto (max for accuracy-like names)")
    factor: float = Field(0.1, gt=0.0, lt=1.0, description="multiplier when the monitor plateaus")
    patience: int = Field(
        10, ge=0, le=1000, description="epochs without improvement before reducing"
    )
    min_delta: float = Field(
        1e-4, ge=0.0, le=1e6, description="smallest change that counts as improvement"
    )
    cooldown: int = Field(0, ge=0, le=1000, description="epochs to wait after a reduction")
    min_lr: float = Field(0.0, ge=0.0, le=10.0, description="the rate never goes below this")

    def watches(self) -> tuple[str, Mode, float] | None:
        return self.monitor, self.mode, self.min_delta

    def initial_state(self) -> dict[str, Any]:
        return {"best": None, "wait": 0, "cooldown_counter": 0}

    def next_rate(
        self, state: dict[str, Any], value: float | None, rate: float, better: Better
    ) -> float:
        if value is None:
            return rate
        if state["cooldown_counter"] > 0:
            state["cooldown_counter"] -= 1
            state["wait"] = 0
        if better(value, state["best"]):
            state["best"], state["wait"] = value, 0
        elif state["cooldown_counter"] <= 0:
            state["wait"] += 1
            if state["wait"] >= self.patience and rate > _float32(self.min_lr):
                rate = max(rate * self.factor, self.min_lr)
                state["cooldown_counter"], state["wait"] = self.cooldown, 0
        return rate
