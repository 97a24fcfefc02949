"""What every optimizer is: a strict spec model that also knows the state it keeps per
parameter and its update rule in both frameworks.

An optimizer module never imports a framework: the PyTorch back-end hands `torch_optimizer` its
kit (`t.torch.optim`), the TensorFlow one hands `keras_update` its update kit (`k.ops`) and its
generic optimizer, which holds the slots and applies decoupled decay; each as the Protocols of
app.schemas.optimizer_kits, which mypy checks the updates against. The Keras rule does PyTorch's
arithmetic where the two libraries differ, so a spec's optimizer means one thing.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from app.schemas.graph.kits import T, TorchKit
from app.schemas.optimizer_kits import KerasSlots, KerasUpdateKit, KerasValue, TorchParams
from app.schemas.strict import StrictModel


class Optimizer(StrictModel):
    """An optimizer. Subclasses set `name` (a Literal) and their own bounded fields."""

    name: str
    learning_rate: float = Field(
        0.001,
        gt=0.0,
        le=10.0,
        allow_inf_nan=False,
        description="the base rate; lr_scheduler changes it per epoch",
    )

    # Why one of this optimizer's fields is not another's, for the message that refuses it.
    field_hints: ClassVar[dict[str, str]] = {}

    def slot_groups(self) -> tuple[tuple[str, ...], ...]:
        """The state tensors kept per parameter (each of its shape), by Keras' names.

        Grouped as Keras' own optimizer creates them (a group is made parameter by parameter,
        interleaved), so the TensorFlow checkpoint lays its state out as it always has.
        """
        return ()

    def slots(self) -> tuple[str, ...]:
        """Every state tensor kept per parameter: what the cost model counts."""
        return tuple(name for group in self.slot_groups() for name in group)

    def decoupled_decay(self) -> float | None:
        """Decay applied as p -= lr * decay * p before each step (AdamW's); None: none."""
        return None

    def torch_optimizer(self, t: TorchKit[T], params: TorchParams[T]) -> object:
        """The torch.optim optimizer over `params` at the base rate: tensors, or parameter
        groups (dicts) that set their own "lr"."""
        raise NotImplementedError

    def keras_update(
        self,
        k: KerasUpdateKit,
        opt: KerasSlots,
        gradient: KerasValue,
        variable: KerasValue,
        lr: KerasValue,
    ) -> None:
        """One step of `variable` in keras.ops (gradient and lr already in its dtype); the
        state is `opt.slot(name, variable)`, updated through opt.assign / assign_add /
        assign_sub (distribution-aware), and `opt.iterations` counts the steps taken."""
        raise NotImplementedError
