"""adam: torch.optim.Adam, with Keras' epsilon (1e-7) in both frameworks."""

from __future__ import annotations

from typing import Literal

from app.schemas.graph.kits import T, TorchKit
from app.schemas.optimizer_kits import KerasSlots, KerasUpdateKit, KerasValue, TorchParams
from app.schemas.optimizers.base import Optimizer

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7


class AdamSpec(Optimizer):
    """Adam: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), PyTorch's form."""

    name: Literal["adam"] = "adam"

    def slot_groups(self) -> tuple[tuple[str, ...], ...]:
        return (("momentum", "velocity"),)

    def torch_optimizer(self, t: TorchKit[T], params: TorchParams[T]) -> object:
        # The fused kernel: one op per step for all parameters, on CPU too.
        return t.torch.optim.Adam(
            params, lr=self.learning_rate, betas=(BETA_1, BETA_2), eps=EPSILON, fused=True
        )

    def keras_update(
        self,
        k: KerasUpdateKit,
        opt: KerasSlots,
        gradient: KerasValue,
        variable: KerasValue,
        lr: KerasValue,
    ) -> None:
        # Keras adds epsilon before the second moment's bias correction, PyTorch after it.
        ops = k.ops
        step = ops.cast(opt.iterations + 1, variable.dtype)
        bias_1 = 1 - ops.power(ops.cast(BETA_1, variable.dtype), step)
        bias_2 = 1 - ops.power(ops.cast(BETA_2, variable.dtype), step)
        m, v = opt.slot("momentum", variable), opt.slot("velocity", variable)
        opt.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - BETA_1))
        opt.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - BETA_2))
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(bias_2)), EPSILON)
        opt.assign_sub(variable, ops.divide(ops.multiply(m, lr / bias_1), denominator))
