"""Any optimizer of the registry as a Keras optimizer, doing its module's (PyTorch's) arithmetic.

Keras and PyTorch differ in small ways that add up (where epsilon sits in Adam and RMSprop,
whether a momentum buffer holds rate-scaled steps), so each optimizer module writes its update
in keras.ops with PyTorch's arithmetic, and this one class runs it: only `update_step` is
replaced (the extension point Keras documents for custom optimizers). The rest is Keras' base
optimizer: the step counter, the rate variable, distribution. The slots are made as Keras' own
class for that optimizer makes them, in the same order, so the checkpoint's state.npz lays them
out as before.

A node's lr_multiplier scales its variables' rate in `update_step`, decoupled decay included:
PyTorch's parameter groups do the same (their rate drives AdamW's decay), so the decay is taken
here, per variable, rather than by Keras' base class at the schedule's rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from app.schemas.optimizer_kits import KerasUpdateKit
from app.schemas.optimizers import Optimizer


class _UpdateKit:
    """What an optimizer's keras_update gets. Keras ships no types: the kit's Protocol
    (app.schemas.optimizer_kits.KerasUpdateKit) is what the updates are checked against."""

    ops = keras.ops


KIT: KerasUpdateKit = _UpdateKit()


class RegistryOptimizer(keras.optimizers.Optimizer):
    """The spec's optimizer: slots from its slot_groups, steps from its keras_update.

    `multipliers` pairs model variables with their lr_multiplier; a variable it leaves out
    steps at the schedule's rate.
    """

    def __init__(
        self, spec: Optimizer, multipliers: Sequence[tuple[keras.Variable, float]] = ()
    ) -> None:
        super().__init__(spec.learning_rate, name=spec.name)
        self.spec, self.decay = spec, spec.decoupled_decay()
        self._slots: dict[str, list[keras.Variable]] = {}
        self._given = [(v, m) for v, m in multipliers if m != 1.0]
        self._multipliers: list[float] = []

    def build(self, variables: list[keras.Variable]) -> None:
        if self.built:
            return
        super().build(variables)
        slots: dict[str, list[keras.Variable]] = {}
        for group in self.spec.slot_groups():
            made = self.add_optimizer_variables(variables, list(group))
            slots.update(zip(group, made, strict=True))
        self._slots = slots
        given = {id(v): m for v, m in self._given}
        self._multipliers = [given.pop(id(v), 1.0) for v in variables]
        if given:  # a multiplied variable the optimizer does not train: it would not scale
            raise RuntimeError(f"{len(given)} variables with an lr_multiplier do not train")

    def slot(self, name: str, variable: keras.Variable) -> keras.Variable:
        """The state tensor `name` of a model variable."""
        return self._slots[name][self._get_variable_index(variable)]

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        dtype = variable.dtype
        lr, gradient = ops.cast(learning_rate, dtype), ops.cast(gradient, dtype)
        multiplier = self._multipliers[self._get_variable_index(variable)]
        if multiplier != 1.0:
            lr = ops.multiply(lr, ops.cast(multiplier, dtype))
        if self.decay is not None:  # p -= p * decay * lr, as Keras' base class takes it
            decay = ops.cast(self.decay, dtype)
            self.assign_sub(variable, ops.multiply(ops.multiply(variable, decay), lr))
        self.spec.keras_update(KIT, self, gradient, variable, lr)
