"""Any optimizer of the registry as a Keras optimizer, doing its module's (PyTorch's) arithmetic.

Keras and PyTorch differ in small ways that add up (where epsilon sits in Adam and RMSprop,
whether a momentum buffer holds rate-scaled steps), so each optimizer module writes its update
in keras.ops with PyTorch's arithmetic, and this one class runs it: only `update_step` is
replaced (the extension point Keras documents for custom optimizers). The rest is Keras' base
optimizer: the step counter, the rate variable, decoupled weight decay, distribution. The slots
are made as Keras' own class for that optimizer makes them, in the same order, so the
checkpoint's state.npz lays them out as before.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from app.schemas.optimizers import Optimizer
from worker.training.tf.graph import KIT


class RegistryOptimizer(keras.optimizers.Optimizer):
    """The spec's optimizer: slots from its slot_groups, steps from its keras_update."""

    def __init__(self, spec: Optimizer) -> None:
        super().__init__(spec.learning_rate, weight_decay=spec.decoupled_decay(), name=spec.name)
        self.spec = spec
        self._slots: dict[str, list[keras.Variable]] = {}

    def build(self, variables: list[keras.Variable]) -> None:
        if self.built:
            return
        super().build(variables)
        slots: dict[str, list[keras.Variable]] = {}
        for group in self.spec.slot_groups():
            made = self.add_optimizer_variables(variables, list(group))
            slots.update(zip(group, made, strict=True))
        self._slots = slots

    def slot(self, name: str, variable: keras.Variable) -> keras.Variable:
        """The state tensor `name` of a model variable."""
        return self._slots[name][self._get_variable_index(variable)]

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        dtype = variable.dtype
        lr, gradient = ops.cast(learning_rate, dtype), ops.cast(gradient, dtype)
        self.spec.keras_update(KIT, self, gradient, variable, lr)
