"""Keras optimizers doing exactly PyTorch's arithmetic, so a spec's optimizer means one thing.

Keras and PyTorch differ in small ways that add up: Adam's epsilon is added before the bias
correction of the second moment in Keras and after it in PyTorch; RMSprop's epsilon sits inside
the square root in Keras and outside in PyTorch; SGD's (and RMSprop's) momentum buffer holds
rate-scaled steps in Keras but raw gradients in PyTorch, which differ once a schedule changes
the rate. Only `update_step` is replaced (the extension point Keras documents for custom
optimizers); slots, weight decay, distribution and checkpoints stay Keras'.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


class _TorchAdamStep:
    """torch.optim.Adam: p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)."""

    def update_step(self: Any, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        step = ops.cast(self.iterations + 1, variable.dtype)
        bias_1 = 1 - ops.power(ops.cast(self.beta_1, variable.dtype), step)
        bias_2 = 1 - ops.power(ops.cast(self.beta_2, variable.dtype), step)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(bias_2)), self.epsilon)
        self.assign_sub(variable, ops.divide(ops.multiply(m, lr / bias_1), denominator))


class Adam(_TorchAdamStep, keras.optimizers.Adam):
    pass


class AdamW(_TorchAdamStep, keras.optimizers.AdamW):
    """Decoupled decay as torch.optim.AdamW: Keras applies p -= lr * wd * p before the step."""


class SGD(keras.optimizers.SGD):
    """torch.optim.SGD: buf = momentum * buf + g; p -= lr * (nesterov ? g + momentum*buf : buf)."""

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        if self.momentum == 0:
            self.assign_sub(variable, ops.multiply(gradient, lr))
            return
        momentum = ops.cast(self.momentum, variable.dtype)
        buf = self.momentums[self._get_variable_index(variable)]
        self.assign(buf, ops.add(ops.multiply(buf, momentum), gradient))
        update = ops.add(gradient, ops.multiply(buf, momentum)) if self.nesterov else buf
        self.assign_sub(variable, ops.multiply(update, lr))


class RMSprop(keras.optimizers.RMSprop):
    """torch.optim.RMSprop (not centered): p -= lr * g / (sqrt(v) + eps), momentum on g/avg."""

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        velocity = self._velocities[self._get_variable_index(variable)]
        self.assign(
            velocity,
            ops.add(
                ops.multiply(self.rho, velocity), ops.multiply(1 - self.rho, ops.square(gradient))
            ),
        )
        step = ops.divide(gradient, ops.add(ops.sqrt(velocity), self.epsilon))
        if self.momentum > 0:
            buf = self._momentums[self._get_variable_index(variable)]
            self.assign(buf, ops.add(ops.multiply(self.momentum, buf), step))
            step = buf
        self.assign_sub(variable, ops.multiply(step, lr))


def build_optimizer(
    name: str, learning_rate: float, momentum: float, nesterov: bool, weight_decay: float
) -> keras.Optimizer:
    """The spec's optimizer with PyTorch's defaults and arithmetic (eps 1e-7 as Keras')."""
    if name == "adam":
        return Adam(learning_rate, epsilon=1e-7)
    if name == "adamw":
        return AdamW(learning_rate, weight_decay=weight_decay, epsilon=1e-7)
    if name == "sgd":
        return SGD(learning_rate, momentum=momentum, nesterov=nesterov)
    return RMSprop(learning_rate, rho=0.9, momentum=momentum, epsilon=1e-7)
