"""cosine: a linear warmup (LinearLR), then CosineAnnealingLR held at min_lr."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from app.schemas.schedules.base import Schedule


class CosineLRSpec(Schedule):
    """Linear warmup then cosine annealing to min_lr over t_max epochs (default: all)."""

    name: Literal["cosine"] = "cosine"
    t_max: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="epochs of the cosine after warmup (default: the rest of training)",
    )
    min_lr: float = Field(0.0, ge=0.0, le=10.0, description="the rate at the end of the cosine")
    warmup_epochs: int = Field(0, ge=0, le=1000, description="linear warmup to learning_rate first")

    def epoch_rate(self, base_lr: float, epoch_index: int, epochs: int) -> float | None:
        warmup = self.warmup_epochs
        if epoch_index < warmup:  # LinearLR(start_factor=1/warmup, total_iters=warmup-1)
            return base_lr * (epoch_index + 1) / warmup
        t_max = self.t_max or max(epochs - warmup, 1)
        t = min(epoch_index - warmup, t_max)
        return self.min_lr + (base_lr - self.min_lr) * (1 + math.cos(math.pi * t / t_max)) / 2
