"""Every field of the spec works in both frameworks and means the same thing in each.

Each case combines several options into one small job (a few hundred samples, 2-3 epochs) and
runs it through the worker's attempt code in PyTorch and in TensorFlow. It must succeed with
finite metrics, learn something, and — since both back-ends start from the same weights and see
the same batches — report the same training loss in each, within a tolerance that only dropout
(different random streams) and bf16 (different ops kept in fp32) loosen.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from app.domain.job_files import JobFiles
from tests.worker.training.inprocess import Run, make_spec, run_spec

pytestmark = [pytest.mark.torch, pytest.mark.tf]
SMALL = {"name": "digits", "limit": 400}

CASES: dict[str, tuple[dict[str, Any], float]] = {  # fields, relative loss tolerance
    "mlp-batchnorm-gelu-adamw-standard": (
        {
            "dataset": {**SMALL, "normalize": "standard"},
            "model": {"hidden_units": [32, 16], "batch_norm": True, "activation": "gelu"},
            "optimizer": {"name": "adamw", "learning_rate": 0.01, "weight_decay": 0.05},
            "lr_scheduler": {"name": "cosine", "warmup_epochs": 1},
        },
        1e-3,
    ),
    "mlp-dropout-sigmoid-rmsprop-raw-pixels": (
        {
            "dataset": {**SMALL, "normalize": "none"},
            "model": {"hidden_units": [32], "dropout": 0.3, "activation": "sigmoid"},
            "optimizer": {"name": "rmsprop", "learning_rate": 0.003, "momentum": 0.5},
        },
        0.1,
    ),
    "mlp-tanh-nesterov-unshuffled": (
        {
            "dataset": SMALL,
            "model": {"hidden_units": [32], "activation": "tanh"},
            "training": {"epochs": 3, "batch_size": 50, "shuffle": False},
            "optimizer": {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True},
            "lr_scheduler": {"name": "exponential", "gamma": 0.7},
            "checkpoint_every_epochs": 2,
        },
        1e-3,
    ),
    "cnn-maxpool-plateau": (
        {
            "dataset": SMALL,
            "model": {"type": "cnn", "conv_channels": [8, 16], "pool": "max", "dense_units": [32]},
            "optimizer": {"name": "adam", "learning_rate": 0.005},
            "lr_scheduler": {"name": "reduce_on_plateau", "patience": 0, "factor": 0.5},
        },
        1e-3,
    ),
    "cnn-avgpool-sgd": (
        {
            "dataset": SMALL,
            "model": {"type": "cnn", "conv_channels": [8], "pool": "avg", "dense_units": []},
            "optimizer": {"name": "sgd", "learning_rate": 0.05, "momentum": 0.9},
            "regularization": {"l2": 0.001},
        },
        1e-3,
    ),
    "cnn-nopool-dropout-relu": (
        {
            "dataset": SMALL,
            "model": {"type": "cnn", "conv_channels": [4], "pool": "none", "dropout": 0.2},
        },
        0.1,
    ),
    "fashion-mnist-cnn": (
        {
            "dataset": {"name": "fashion_mnist", "limit": 600},
            "model": {"type": "cnn", "conv_channels": [8], "dense_units": [16]},
            "training": {"epochs": 2, "batch_size": 64},
        },
        1e-3,
    ),
    "regression-synthetic": (
        {
            "task": "regression",
            "dataset": {"name": "synthetic", "samples": 600, "features": 8},
            "model": {"hidden_units": [32]},
            "optimizer": {"name": "sgd", "learning_rate": 0.05, "momentum": 0.9},
        },
        1e-3,
    ),
    "bf16": (
        {"dataset": SMALL, "model": {"hidden_units": [64]}, "resources": {"precision": "bf16"}},
        0.05,
    ),
}


def checkpoints(workdir: Path) -> list[str]:
    return sorted(p.name for p in JobFiles(workdir).checkpoints.glob("epoch-*"))


def expected_checkpoints(epochs: int, every: int) -> list[str]:
    """Every `every` epochs plus the final state; the last two are kept."""
    saved = sorted({e for e in range(1, epochs + 1) if e % every == 0} | {epochs})
    return [f"epoch-{e:04d}" for e in saved[-2:]]


def learned(run: Run, regression: bool) -> bool:
    first, last = run.rows[0], run.rows[-1]
    if regression:
        return last["val_loss"] < first["val_loss"]
    return last["val_accuracy"] > 0.3  # ten classes: chance is 0.1


@pytest.mark.parametrize("case", list(CASES))
def test_option_works_and_means_the_same_in_both(case: str, tmp_path: Path) -> None:
    fields, tolerance = CASES[case]
    fields = {"training": {"epochs": 2, "batch_size": 32}, **fields}
    runs = {f: run_spec(make_spec(f, **fields), tmp_path / f) for f in ("pytorch", "tensorflow")}
    epochs = fields["training"]["epochs"]
    for framework, run in runs.items():
        assert run.outcome.status == "succeeded", (framework, run.outcome)
        assert [row["epoch"] for row in run.rows] == list(range(1, epochs + 1))
        assert all(math.isfinite(v) for row in run.rows for v in row.values()), run.rows
        assert learned(run, fields.get("task") == "regression"), (framework, run.rows)
        every = fields.get("checkpoint_every_epochs", 1)
        assert checkpoints(tmp_path / framework) == expected_checkpoints(epochs, every)
    losses = {f: [row["train_loss"] for row in run.rows] for f, run in runs.items()}
    assert losses["pytorch"] == pytest.approx(losses["tensorflow"], rel=tolerance), losses
