"""step: torch.optim.lr_scheduler.StepLR stepped per epoch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.schemas.schedules.base import Schedule


class StepLRSpec(Schedule):
    """lr = base * gamma ** (epoch_index // step_size), as torch's StepLR stepped per epoch."""

    name: Literal["step"] = "step"
    step_size: int = Field(1, ge=1, le=1000, description="epochs between decays")
    gamma: float = Field(0.1, gt=0.0, le=1.0, description="multiplier at each decay")

    def epoch_rate(self, base_lr: float, epoch_index: int, epochs: int) -> float | None:
        return base_lr * self.gamma ** (epoch_index // self.step_size)
