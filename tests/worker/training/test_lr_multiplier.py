"""A node's lr_multiplier in real training, in both frameworks: from the same weights on the same
batch, one step moves a multiplied node's variables by exactly the multiplier times the step
they take without it (decoupled decay included), at whatever rate the schedule set, and leaves
the others' steps alone; PyTorch and TensorFlow take the same steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.worker.training.inprocess import EMPTY_DATA_DIR, backend_for, make_spec
from worker.training.callbacks import TrainState
from worker.training.data import load_splits
from worker.training.warm_start import graph_for, keys

pytestmark = [pytest.mark.torch, pytest.mark.tf]
FRAMEWORKS = ["pytorch", "tensorflow"]
LAYERS: list[dict[str, Any]] = [
    {"name": "flat", "op": "flatten"},
    {"name": "d1", "op": "dense", "units": 16},
    {"name": "act", "op": "activation", "fn": "tanh"},
    {"name": "d2", "op": "dense", "units": 16},
]
MULTIPLIERS = {"d1": 0.01, "d2": 3.0}  # the head keeps the schedule's rate
ONE_BATCH = {
    "dataset": {"name": "digits", "limit": 64, "validation_split": 0.0},
    "training": {"epochs": 1, "batch_size": 64},
}
# Not the spec's learning_rate: the schedule's rate is what the multiplier scales.
RATE = 0.05
OPTIMIZERS = {
    "sgd": {"name": "sgd", "learning_rate": 0.1},
    "adamw": {"name": "adamw", "learning_rate": 0.1, "weight_decay": 0.5},
}
EPS = float(np.finfo(np.float32).eps)

Step = tuple[list[tuple[str, str]], list[np.ndarray], list[np.ndarray]]


def first_step(framework: str, optimizer: dict[str, Any], multipliers: dict[str, float]) -> Step:
    """(node, variable) keys, the weights before and after one step at RATE."""
    layers = [
        {**x, "lr_multiplier": multipliers[x["name"]]} if x["name"] in multipliers else x
        for x in LAYERS
    ]
    model = {"type": "graph", "layers": layers}
    spec = make_spec(framework, model=model, optimizer=optimizer, **ONE_BATCH)
    named = keys(graph_for(spec, load_splits(spec, EMPTY_DATA_DIR)))
    with backend_for(spec) as backend:
        before = backend.get_weights()
        backend.set_learning_rate(RATE)
        assert backend.train_epoch(TrainState(epochs=1, learning_rate=RATE)) is not None
        return named, before, backend.get_weights()


def assert_scaled(
    moved: np.ndarray, plain: np.ndarray, start: np.ndarray, by: float, what: str
) -> None:
    """moved == by * plain to 1e-5 relative, give or take the float32 rounding of the weights
    both steps land on (a bias starts at zero, so there it is the ratio alone)."""
    rounding = 2 * EPS * (1 + by) * (np.abs(start) + np.abs(moved))
    slack = 1e-5 * np.abs(by * plain) + rounding
    off = np.abs(moved - by * plain) - slack
    assert np.all(off <= 0), f"{what}: not {by} x its plain step, off by up to {np.max(off):.3g}"


@pytest.mark.parametrize("optimizer", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_one_step_scales_a_nodes_update_by_its_multiplier(optimizer: dict[str, Any]) -> None:
    steps: dict[str, list[np.ndarray]] = {}
    for framework in FRAMEWORKS:
        named, start, plain = first_step(framework, optimizer, {})
        _, again, scaled = first_step(framework, optimizer, MULTIPLIERS)
        for a, b in zip(start, again, strict=True):
            assert np.array_equal(a, b)  # the same seed draws the same weights
        for (node, variable), w, p, s in zip(named, start, plain, scaled, strict=True):
            by = MULTIPLIERS.get(node, 1.0)
            assert np.any(p != w), f"{framework}: {node}/{variable} did not move"
            assert_scaled(s - w, p - w, w, by, f"{framework} {node}/{variable}")
            if node == "d1":  # a tiny multiplier: a step a hundredth as long
                assert np.linalg.norm(s - w) < 0.011 * np.linalg.norm(p - w)
        steps[framework] = [s - w for w, s in zip(start, scaled, strict=True)]
    pairs = zip(named, start, steps["pytorch"], steps["tensorflow"], strict=True)
    for (node, variable), w, a, b in pairs:  # the same steps, as test_parity's runs
        atol = 1e-5 * float(np.max(np.abs(a))) + 4 * EPS * float(np.max(np.abs(w)))
        np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=f"{node}/{variable}")
