"""Every optimizer of the registry holds, in both frameworks, the state its module declares
(what the cost model counts), and in TensorFlow lays it out as Keras' own class for it does,
so a checkpoint written before the registry still loads slot for slot."""

from __future__ import annotations

from typing import Any

import pytest

from app.schemas.optimizers import OPTIMIZERS, Optimizer

pytestmark = [pytest.mark.torch, pytest.mark.tf]
SHAPES = [(3, 2), (2,), (4, 3)]


def with_every_slot(name: str) -> Optimizer:
    """The optimizer with each optional state turned on (momentum where it has one)."""
    kind = OPTIMIZERS[name]
    fields: dict[str, Any] = {"name": name}
    if "momentum" in kind.model_fields:
        fields["momentum"] = 0.5
    return kind.model_validate(fields)


def keras_own(spec: Optimizer) -> Any:
    """Keras' own optimizer of that name, as the TensorFlow back-end used before the registry."""
    import keras

    own = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "rmsprop": "RMSprop"}[spec.name]
    fields = {k: v for k, v in spec.model_dump().items() if k not in ("name", "learning_rate")}
    return getattr(keras.optimizers, own)(spec.learning_rate, **fields)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_torch_keeps_the_declared_slots(name: str) -> None:
    import torch

    from worker.training.torch.graph import KIT

    spec = with_every_slot(name)
    params = [torch.nn.Parameter(torch.ones(shape)) for shape in SHAPES]
    optimizer = spec.torch_optimizer(KIT, params)
    for p in params:
        p.grad = torch.full_like(p, 0.1)
    optimizer.step()
    for p in params:
        kept = [t for t in optimizer.state[p].values() if tuple(t.shape) == tuple(p.shape)]
        assert len(kept) == len(spec.slots()) > 0


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_keras_lays_the_slots_out_as_its_own_optimizer(name: str) -> None:
    import keras

    from worker.training.tf.optimizers import RegistryOptimizer

    spec = with_every_slot(name)
    variables = [
        keras.Variable(keras.ops.ones(shape), name=f"w{i}") for i, shape in enumerate(SHAPES)
    ]
    ours, theirs = RegistryOptimizer(spec), keras_own(spec)
    ours.build(variables)
    theirs.build(variables)
    layout = [(v.name, tuple(v.shape)) for v in ours.variables]
    assert layout == [(v.name, tuple(v.shape)) for v in theirs.variables]
    assert len(ours.variables) == 2 + len(SHAPES) * len(spec.slots())  # + steps and rate
