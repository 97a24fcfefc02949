"""Early stopping decides exactly as keras.callbacks.EarlyStopping on a table of sequences."""

from __future__ import annotations

import os

import numpy as np
import pytest

from worker.training.callbacks import Monitor, TrainState
from worker.training.early_stopping import EarlyStopping

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CASES = [
    # (values, mode, patience, min_delta, baseline, start_from_epoch)
    ([1.0, 0.9, 0.8, 0.7, 0.6], "min", 2, 0.0, None, 0),
    ([1.0, 1.0, 1.0, 1.0, 1.0], "min", 2, 0.0, None, 0),  # ties are not improvements
    ([1.0, 0.95, 0.91, 0.9, 0.89, 0.7], "min", 1, 0.05, None, 0),  # min_delta edges
    ([1.0, 0.95, 0.9, 0.85, 0.8], "min", 1, 0.05, None, 0),  # exactly min_delta: not enough
    ([0.5, 0.6, 0.6, 0.59, 0.61, 0.7], "max", 2, 0.0, None, 0),
    ([0.5, 0.6, 0.65, 0.7, 0.72], "max", 1, 0.0, 0.71, 0),  # baseline never beaten until late
    ([3.0, 2.0, 2.5, 2.4, 2.3, 2.2, 1.0], "min", 3, 0.0, None, 2),  # warm-up epochs ignored
    ([1.0, 2.0, 3.0], "min", 0, 0.0, None, 0),  # patience 0
    ([1.0, 0.5, 0.6, 0.4, 0.7, 0.8, 0.9], "min", 2, 0.0, None, 0),
]


def keras_run(
    values: list[float],
    mode: str,
    patience: int,
    min_delta: float,
    baseline: float | None,
    start: int,
) -> tuple[int | None, int, list[float]]:
    """(epoch it stopped after, 1-based or None; best epoch 1-based; restored weight)."""
    import keras

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    callback = keras.callbacks.EarlyStopping(
        monitor="val_loss",
        mode=mode,
        patience=patience,
        min_delta=min_delta,
        baseline=baseline,
        start_from_epoch=start,
        restore_best_weights=True,
    )
    callback.set_model(model)
    model.stop_training = False
    callback.on_train_begin()
    stopped = None
    for epoch, value in enumerate(values):
        model.set_weights([np.array([[float(epoch)]])])  # weights remember the epoch
        callback.on_epoch_end(epoch, {"val_loss": value})
        if model.stop_training:
            stopped = epoch + 1
            break
    callback.on_train_end()
    return stopped, callback.best_epoch + 1, [float(model.get_weights()[0][0][0])]


def ours(
    values: list[float],
    mode: str,
    patience: int,
    min_delta: float,
    baseline: float | None,
    start: int,
) -> tuple[int | None, int, list[float]]:
    weights = [np.zeros((1, 1))]
    callback = EarlyStopping(
        Monitor("val_loss", mode, min_delta),
        patience,
        baseline=baseline,  # type: ignore[arg-type]
        start_from_epoch=start,
        restore_best_weights=True,
        get_weights=lambda: weights,
        set_weights=lambda w: weights.__setitem__(0, w[0]),
    )
    state = TrainState(epochs=len(values), learning_rate=0.1)
    callback.on_train_begin(state)
    stopped = None
    for value in values:
        state.epoch += 1
        weights[0] = np.array([[float(state.epoch - 1)]])
        callback.on_epoch_end(state, {"val_loss": value})
        if state.should_stop:
            stopped = state.epoch
            break
    callback.on_train_end(state, {})
    return stopped, callback.best_epoch + 1, [float(weights[0][0][0])]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_matches_keras(case: tuple) -> None:  # type: ignore[type-arg]
    assert ours(*case) == keras_run(*case)


def test_state_survives_a_resume() -> None:
    values = [1.0, 0.9, 0.95, 0.96, 0.97]
    first = EarlyStopping(Monitor("val_loss", "min"), 2)
    state = TrainState(epochs=5, learning_rate=0.1)
    for value in values[:3]:
        state.epoch += 1
        first.on_epoch_end(state, {"val_loss": value})
    second = EarlyStopping(Monitor("val_loss", "min"), 2)
    second.load_state_dict(first.state_dict())
    state.epoch += 1
    second.on_epoch_end(state, {"val_loss": values[3]})
    assert state.should_stop and state.stop_reason == "early_stopping" and state.epoch == 4
