"""One schedule computation for both back-ends, matched against torch's and Keras' own."""

from __future__ import annotations

import pytest
import torch

from app.schemas.schedules import SCHEDULES
from app.schemas.schedules.cosine import CosineLRSpec
from app.schemas.schedules.exponential import ExponentialLRSpec
from app.schemas.schedules.reduce_on_plateau import ReduceOnPlateauSpec
from app.schemas.schedules.step import StepLRSpec
from worker.training.callbacks import TrainState
from worker.training.schedules import LRSchedule, epoch_rate

EPOCHS, BASE = 20, 0.1


def torch_rates(make: object) -> list[float]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=BASE)
    scheduler = make(optimizer)  # type: ignore[operator]
    rates = []
    for _ in range(EPOCHS):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def ours(spec: object) -> list[float]:
    return [epoch_rate(spec, BASE, e, EPOCHS) for e in range(EPOCHS)]  # type: ignore[arg-type]


CLOSED_FORMS = [
    (StepLRSpec(step_size=3, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5)),
    (StepLRSpec(step_size=1, gamma=0.1), lambda o: torch.optim.lr_scheduler.StepLR(o, 1, 0.1)),
    (ExponentialLRSpec(gamma=0.9), lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.9)),
    (
        CosineLRSpec(min_lr=0.001),
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, EPOCHS, 0.001),
    ),
    (
        CosineLRSpec(warmup_epochs=4, min_lr=0.0),
        lambda o: torch.optim.lr_scheduler.SequentialLR(
            o,
            [
                torch.optim.lr_scheduler.LinearLR(o, 0.25, 1.0, total_iters=3),
                torch.optim.lr_scheduler.CosineAnnealingLR(o, EPOCHS - 4, 0.0),
            ],
            milestones=[4],
        ),
    ),
]


@pytest.mark.parametrize(
    ("spec", "make"),
    CLOSED_FORMS,
    ids=["step3", "step1-seed", "exponential", "cosine", "cosine-warmup"],
)
def test_closed_forms_match_torch(spec: object, make: object) -> None:
    assert ours(spec) == pytest.approx(torch_rates(make), rel=1e-6, abs=1e-12)


def test_every_registered_schedule_is_checked_here() -> None:
    """The closed forms above against torch, the one that reacts to a metric against Keras."""
    closed = {spec.name for spec, _ in CLOSED_FORMS}
    assert closed | {"reduce_on_plateau"} == set(SCHEDULES)
    assert ReduceOnPlateauSpec().epoch_rate(BASE, 3, EPOCHS) is None
    assert all(SCHEDULES[name]().watches() is None for name in closed)


def test_plateau_matches_keras_reduce_lr_on_plateau() -> None:
    import keras

    values = [
        1.0,
        0.9,
        0.9,
        0.91,
        0.95,
        0.85,
        0.86,
        0.86,
        0.87,
        0.88,
        0.8,
        0.8,
        0.8,
        0.8,
        0.79,
        0.79,
        0.79,
        0.79,
        0.79,
        0.79,
    ]
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(BASE), loss="mse")
    reference = keras.callbacks.ReduceLROnPlateau(
        monitor="val_loss", factor=0.5, patience=2, min_delta=0.005, cooldown=1, min_lr=0.01
    )
    reference.set_model(model)
    reference.on_train_begin()
    spec = ReduceOnPlateauSpec(
        monitor="val_loss", factor=0.5, patience=2, min_delta=0.005, cooldown=1, min_lr=0.01
    )
    schedule, state = LRSchedule(spec, BASE), TrainState(epochs=EPOCHS, learning_rate=BASE)
    keras_rates, our_rates = [], []
    for epoch, value in enumerate(values):
        keras_rates.append(float(model.optimizer.learning_rate))
        reference.on_epoch_end(epoch, {"val_loss": value})
        schedule.on_epoch_begin(state)
        our_rates.append(state.learning_rate)
        state.epoch += 1
        schedule.on_epoch_end(state, {"val_loss": value})
    assert our_rates == pytest.approx(keras_rates, rel=1e-6)
    assert len(set(our_rates)) >= 3  # the sequence really triggers reductions and the floor
