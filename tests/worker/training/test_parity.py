"""The same spec means the same training in PyTorch and TensorFlow, and repeats exactly.

Both back-ends start from the same weights (drawn by worker.training.init), see the same sample
order and follow the same rate, so one step from the same weights on the same batch must give
the same weights, and whole runs must land in the same place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.worker.training.inprocess import backend_for, make_spec, run_spec
from worker.training.backend import kernel_l2
from worker.training.callbacks import TrainState
from worker.training.schedules import epoch_rate

pytestmark = [pytest.mark.torch, pytest.mark.tf]
FRAMEWORKS = ["pytorch", "tensorflow"]


def random_weights(like: list[np.ndarray], seed: int) -> list[np.ndarray]:
    """Not the initial weights: values neither back-end would start from by itself."""
    rng = np.random.default_rng(seed)
    return [rng.normal(0.0, 0.2, size=w.shape).astype(np.float32) for w in like]


def one_epoch_in_each(fields: dict[str, Any], rate: float) -> dict[str, list[np.ndarray]]:
    """From the same random weights, one epoch of `fields` in each framework; final weights."""
    out: dict[str, list[np.ndarray]] = {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, **fields)
        with backend_for(spec) as backend:
            backend.set_weights(random_weights(backend.get_weights(), seed=3))
            backend.set_learning_rate(rate)
            assert backend.train_epoch(TrainState(epochs=1, learning_rate=rate)) is not None
            out[framework] = backend.get_weights()
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_same_spec_and_seed_give_the_same_metrics(framework: str, tmp_path: Path) -> None:
    spec = make_spec(
        framework,
        model={"hidden_units": [32], "dropout": 0.2, "batch_norm": True},
        training={"epochs": 3, "batch_size": 32},
        dataset={"name": "digits", "limit": 600},
    )
    first, second = run_spec(spec, tmp_path / "a"), run_spec(spec, tmp_path / "b")
    assert first.outcome.status == second.outcome.status == "succeeded"
    keys = ["train_loss", "train_accuracy", "val_loss", "val_accuracy", "learning_rate"]
    for a, b in zip(first.rows, second.rows, strict=True):
        assert [a[k] for k in keys] == pytest.approx([b[k] for k in keys], rel=1e-6)
    for a, b in zip(first.weights, second.weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_l2_term_is_the_same_on_the_same_weights() -> None:
    weights, penalties = None, {}
    for framework in FRAMEWORKS:
        spec = make_spec(
            framework,
            model={"type": "cnn", "conv_channels": [4], "dense_units": [16]},
            regularization={"l2": 0.01},
        )
        with backend_for(spec) as backend:
            weights = weights or random_weights(backend.get_weights(), seed=1)
            backend.set_weights(weights)
            penalties[framework] = backend.l2_penalty()
    assert weights is not None
    kernels = [w.ndim >= 2 for w in weights]  # kernels, not biases
    expected = kernel_l2(weights, kernels, 0.01)
    assert penalties["pytorch"] == pytest.approx(expected, rel=1e-5)
    assert penalties["tensorflow"] == pytest.approx(expected, rel=1e-5)


ONE_BATCH = {
    "dataset": {"name": "digits", "limit": 64, "validation_split": 0.0},
    "training": {"epochs": 1, "batch_size": 64},
    "optimizer": {"name": "sgd", "learning_rate": 0.1},
    "regularization": {"l2": 0.01},
}


@pytest.mark.parametrize(
    "model",
    [
        {"type": "mlp", "hidden_units": [32, 16], "activation": "tanh"},
        {"type": "cnn", "conv_channels": [4, 8], "kernel_size": 3, "dense_units": [16]},
    ],
    ids=["mlp", "cnn"],
)
def test_one_sgd_step_from_the_same_weights_gives_the_same_weights(model: dict[str, Any]) -> None:
    after = one_epoch_in_each({**ONE_BATCH, "model": model}, rate=0.1)
    for a, b in zip(after["pytorch"], after["tensorflow"], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize(
    "optimizer",
    [
        {"name": "adam", "learning_rate": 0.01},
        {"name": "adamw", "learning_rate": 0.01, "weight_decay": 0.1},
        {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9},
        {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True},
        {"name": "rmsprop", "learning_rate": 0.01},
        {"name": "rmsprop", "learning_rate": 0.01, "momentum": 0.5},
    ],
    ids=["adam", "adamw", "sgd-momentum", "sgd-nesterov", "rmsprop", "rmsprop-momentum"],
)
def test_every_optimizer_takes_the_same_steps(optimizer: dict[str, Any]) -> None:
    """Five steps with state (moments, momentum, bias correction, decay) agree to 1e-5."""
    fields = {
        **ONE_BATCH,
        "dataset": {"name": "digits", "limit": 320, "validation_split": 0.0},
        "optimizer": optimizer,
        "model": {"hidden_units": [32, 16]},
    }
    after = one_epoch_in_each(fields, rate=optimizer["learning_rate"])
    for a, b in zip(after["pytorch"], after["tensorflow"], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_a_schedule_moves_the_rate_the_same_way_in_both(tmp_path: Path) -> None:
    """The rows' rates follow the shared schedule, and both back-ends applied them: with
    momentum, a rate change that either applied differently would move the weights apart."""
    fields = {
        "dataset": {"name": "digits", "limit": 256, "validation_split": 0.25},
        "model": {"hidden_units": [16]},
        "training": {"epochs": 4, "batch_size": 64},
        "optimizer": {"name": "sgd", "learning_rate": 0.2, "momentum": 0.9},
        "lr_scheduler": {"name": "step", "step_size": 1, "gamma": 0.5},
    }
    runs = {f: run_spec(make_spec(f, **fields), tmp_path / f) for f in FRAMEWORKS}
    spec = make_spec("pytorch", **fields)
    expected = [epoch_rate(spec.lr_scheduler, 0.2, e, 4) for e in range(4)]
    for run in runs.values():
        assert [row["learning_rate"] for row in run.rows] == pytest.approx(expected, rel=1e-12)
    for a, b in zip(runs["pytorch"].weights, runs["tensorflow"].weights, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize(
    "model",
    [
        {"hidden_units": [128]},  # the PyTorch seed's 784-128-10, on 8x8 digits
        {"hidden_units": [128, 64]},  # the TensorFlow seed's 128-64 relu with L2
    ],
    ids=["pytorch-seed-mlp", "tensorflow-seed-mlp"],
)
def test_the_seeds_mlps_reach_the_same_accuracy_on_digits(
    model: dict[str, Any], tmp_path: Path
) -> None:
    l2 = 0.001 if len(model["hidden_units"]) == 2 else 0.0
    fields = {"model": model, "training": {"epochs": 10}, "regularization": {"l2": l2}}
    accuracy = {
        f: run_spec(make_spec(f, **fields), tmp_path / f).rows[-1]["val_accuracy"]
        for f in FRAMEWORKS
    }
    assert min(accuracy.values()) >= 0.95, accuracy
    assert abs(accuracy["pytorch"] - accuracy["tensorflow"]) <= 0.02, accuracy
