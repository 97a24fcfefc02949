"""sgd: torch.optim.SGD, with optional (Nesterov) momentum."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from app.schemas.graph.kits import T, TorchKit
from app.schemas.optimizer_kits import KerasSlots, KerasUpdateKit, KerasValue, TorchParams
from app.schemas.optimizers.base import Optimizer


class SGDSpec(Optimizer):
    """SGD: buf = momentum * buf + g; p -= lr * (nesterov ? g + momentum * buf : buf)."""

    name: Literal["sgd"] = "sgd"
    momentum: float = Field(
        0.0, ge=0.0, lt=1.0, allow_inf_nan=False, description="0: plain gradient steps"
    )
    nesterov: bool = Field(False, description="Nesterov momentum; needs momentum > 0")

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> SGDSpec:
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov needs optimizer sgd with momentum > 0")
        return self

    def slot_groups(self) -> tuple[tuple[str, ...], ...]:
        return (("momentum",),) if self.momentum else ()

    def torch_optimizer(self, t: TorchKit[T], params: TorchParams[T]) -> object:
        return t.torch.optim.SGD(
            params,
            lr=self.learning_rate,
            momentum=self.momentum,
            nesterov=self.nesterov,
            fused=True,
        )

    def keras_update(
        self,
        k: KerasUpdateKit,
        opt: KerasSlots,
        gradient: KerasValue,
        variable: KerasValue,
        lr: KerasValue,
    ) -> None:
        # Keras' buffer holds rate-scaled steps, PyTorch's raw gradients: they differ once a
        # schedule changes the rate.
        ops = k.ops
        if self.momentum == 0:
            opt.assign_sub(variable, ops.multiply(gradient, lr))
            return
        momentum = ops.cast(self.momentum, variable.dtype)
        buf = opt.slot("momentum", variable)
        opt.assign(buf, ops.add(ops.multiply(buf, momentum), gradient))
        update = ops.add(gradient, ops.multiply(buf, momentum)) if self.nesterov else buf
        opt.assign_sub(variable, ops.multiply(update, lr))
