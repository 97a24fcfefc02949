"""TensorFlow's checkpoint is one array file (weights, optimizer slots, seeds); a checkpoint in
the earlier layout (Keras' model.weights.h5 beside the state) still resumes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.worker.training.inprocess import backend_for, make_spec
from worker.training.callbacks import TrainState
from worker.training.tf.backend import CHECKPOINT_FILE, LEGACY_WEIGHTS

pytestmark = pytest.mark.tf

SPEC = make_spec(
    "tensorflow",
    dataset={"name": "digits", "limit": 300},
    model={"hidden_units": [16], "dropout": 0.2, "batch_norm": True},
    training={"epochs": 1, "batch_size": 32},
)


def arrays(backend: object) -> list[np.ndarray]:
    """Everything a checkpoint carries: the model's variables and the optimizer's."""
    model, optimizer = backend.model, backend.optimizer  # type: ignore[attr-defined]
    return [np.asarray(v.numpy()) for v in [*model.variables, *optimizer.variables]]


def write_legacy(backend: object, directory: Path) -> None:
    backend.model.save_weights(directory / LEGACY_WEIGHTS)  # type: ignore[attr-defined]
    with np.load(directory / CHECKPOINT_FILE) as saved:
        state = {name: saved[name] for name in saved.files if name.startswith("v")}
    np.savez(directory / CHECKPOINT_FILE, **state)  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", ["one-file", "legacy"])
def test_a_checkpoint_restores_every_variable(tmp_path: Path, layout: str) -> None:
    with backend_for(SPEC) as trained:
        trained.train_epoch(TrainState(epochs=1, learning_rate=0.001))
        trained.save_checkpoint(tmp_path)
        if layout == "legacy":  # what the back-end wrote before: Keras' weights file, and
            write_legacy(trained, tmp_path)  # the state file without the weights
        saved = arrays(trained)
    expected = {CHECKPOINT_FILE} | ({LEGACY_WEIGHTS} if layout == "legacy" else set())
    assert {path.name for path in tmp_path.iterdir()} == expected
    with backend_for(SPEC) as fresh:
        before = arrays(fresh)
        fresh.load_checkpoint(tmp_path)
        restored = arrays(fresh)
    assert any(not np.array_equal(a, b) for a, b in zip(before, saved, strict=True))
    for a, b in zip(restored, saved, strict=True):
        np.testing.assert_array_equal(a, b)
