"""rmsprop: torch.optim.RMSprop (not centered), with Keras' rho (0.9) and epsilon (1e-7)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.schemas.graph.kits import T, TorchKit
from app.schemas.optimizer_kits import KerasSlots, KerasUpdateKit, KerasValue, TorchParams
from app.schemas.optimizers.base import Optimizer

RHO, EPSILON = 0.9, 1e-7


class RMSpropSpec(Optimizer):
    """RMSprop: v = rho * v + (1 - rho) * g**2; p -= lr * g / (sqrt(v) + eps), PyTorch's form."""

    name: Literal["rmsprop"] = "rmsprop"
    momentum: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        allow_inf_nan=False,
        description="momentum on the scaled step g / (sqrt(v) + eps); 0: none",
    )

    def slot_groups(self) -> tuple[tuple[str, ...], ...]:
        return (("velocity",), ("momentum",)) if self.momentum else (("velocity",),)

    def torch_optimizer(self, t: TorchKit[T], params: TorchParams[T]) -> object:
        # RMSprop has no fused kernel: the multi-tensor path.
        return t.torch.optim.RMSprop(
            params,
            lr=self.learning_rate,
            alpha=RHO,
            eps=EPSILON,
            momentum=self.momentum,
            foreach=True,
        )

    def keras_update(
        self,
        k: KerasUpdateKit,
        opt: KerasSlots,
        gradient: KerasValue,
        variable: KerasValue,
        lr: KerasValue,
    ) -> None:
        # Keras puts epsilon inside the square root and keeps rate-scaled momentum; PyTorch
        # adds it outside and keeps momentum of the unscaled step.
        ops = k.ops
        velocity = opt.slot("velocity", variable)
        opt.assign(
            velocity,
            ops.add(ops.multiply(RHO, velocity), ops.multiply(1 - RHO, ops.square(gradient))),
        )
        step = ops.divide(gradient, ops.add(ops.sqrt(velocity), EPSILON))
        if self.momentum > 0:
            buf = opt.slot("momentum", variable)
            opt.assign(buf, ops.add(ops.multiply(self.momentum, buf), step))
            step = buf
        opt.assign_sub(variable, ops.multiply(step, lr))
