"""The kits the back-ends hand an optimizer: what its torch_optimizer and keras_update may
call, as Protocols mypy checks (as app.schemas.graph.kits does for an op's builds).

PyTorch: torch_optimizer gets the op kit (app.schemas.graph.kits.TorchKit), whose `torch`
holds `optim`, TorchOptim here: torch.optim's constructors as the optimizers call them,
checked against torch's own signatures where the kit is made (worker.training.torch.graph).
The optimizer comes back opaque (`object`): the back-end that made it knows its class.

Keras: keras_update gets KerasUpdateKit (keras.ops as the updates use it), the back-end's
optimizer as KerasSlots, and tensors as KerasValue, made in worker.training.tf.optimizers.
Keras ships no types, so these Protocols are what the updates are checked against.
"""

from __future__ import annotations

from typing import Any, Protocol, Self, TypeVar

P = TypeVar("P")  # a parameter tensor of the framework

# What an optimizer steps: the parameters, or parameter groups (dicts) that set their own "lr".
TorchParams = list[P] | list[dict[str, Any]]


class TorchOptim(Protocol[P]):
    """`torch.optim` as the optimizers use it: each class by the arguments they pass."""

    def Adam(
        self,
        params: TorchParams[P],
        /,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        fused: bool,
    ) -> object: ...
    def AdamW(
        self,
        params: TorchParams[P],
        /,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        fused: bool,
    ) -> object: ...
    def RMSprop(
        self,
        params: TorchParams[P],
        /,
        *,
        lr: float,
        alpha: float,
        eps: float,
        momentum: float,
        foreach: bool,
    ) -> object: ...
    def SGD(
        self,
        params: TorchParams[P],
        /,
        *,
        lr: float,
        momentum: float,
        nesterov: bool,
        fused: bool,
    ) -> object: ...


class KerasValue(Protocol):
    """A Keras tensor or variable as the updates use it (keras.ops does the rest)."""

    @property
    def dtype(self) -> object: ...
    def __add__(self, other: Self | float, /) -> Self: ...
    def __rsub__(self, other: float, /) -> Self: ...
    def __truediv__(self, other: Self | float, /) -> Self: ...


Value = KerasValue | float


class KerasUpdateOps(Protocol):
    """`keras.ops` as the updates use it."""

    def cast(self, x: Value, dtype: object, /) -> KerasValue: ...
    def add(self, x1: Value, x2: Value, /) -> KerasValue: ...
    def subtract(self, x1: Value, x2: Value, /) -> KerasValue: ...
    def multiply(self, x1: Value, x2: Value, /) -> KerasValue: ...
    def divide(self, x1: Value, x2: Value, /) -> KerasValue: ...
    def power(self, x1: Value, x2: Value, /) -> KerasValue: ...
    def square(self, x: KerasValue, /) -> KerasValue: ...
    def sqrt(self, x: KerasValue, /) -> KerasValue: ...


class KerasUpdateKit(Protocol):
    """What keras_update gets as `k`."""

    @property
    def ops(self) -> KerasUpdateOps: ...


class KerasSlots(Protocol):
    """The back-end's Keras optimizer as an update uses it: the state tensors it keeps per
    variable, its assignments (distribution-aware) and its step counter."""

    @property
    def iterations(self) -> KerasValue: ...
    def slot(self, name: str, variable: KerasValue, /) -> KerasValue: ...
    def assign(self, variable: KerasValue, value: KerasValue, /) -> None: ...
    def assign_add(self, variable: KerasValue, value: KerasValue, /) -> None: ...
    def assign_sub(self, variable: KerasValue, value: KerasValue, /) -> None: ...
