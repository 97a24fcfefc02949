"""exponential: torch.optim.lr_scheduler.ExponentialLR."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.schemas.schedules.base import Schedule


class ExponentialLRSpec(Schedule):
    """lr = base * gamma ** epoch_index, as torch's ExponentialLR."""

    name: Literal["exponential"] = "exponential"
    gamma: float = Field(0.95, gt=0.0, le=1.0, description="multiplier per epoch")

    def epoch_rate(self, base_lr: float, epoch_index: int, epochs: int) -> float | None:
        return base_lr * self.gamma**epoch_index
