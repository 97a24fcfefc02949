"""adamw: torch.optim.AdamW, Adam with decoupled weight decay."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from app.schemas.graph.kits import T, TorchKit
from app.schemas.optimizer_kits import TorchParams
from app.schemas.optimizers.adam import BETA_1, BETA_2, EPSILON, AdamSpec


class AdamWSpec(AdamSpec):
    """AdamW: p -= lr * weight_decay * p, then Adam's step (decoupled, not an L2 loss term)."""

    name: Literal["adamw"] = "adamw"  # type: ignore[assignment]
    weight_decay: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="decoupled decay per step, times the rate (not regularization.l2)",
    )

    field_hints: ClassVar[dict[str, str]] = {
        "weight_decay": "it is decoupled decay; for an L2 term in the loss use regularization.l2"
    }

    def decoupled_decay(self) -> float | None:
        return self.weight_decay

    def torch_optimizer(self, t: TorchKit[T], params: TorchParams[T]) -> object:
        return t.torch.optim.AdamW(
            params,
            lr=self.learning_rate,
            betas=(BETA_1, BETA_2),
            eps=EPSILON,
            weight_decay=self.weight_decay,
            fused=True,
        )
