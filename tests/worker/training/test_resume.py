"""A killed attempt resumed from its checkpoint in a fresh back-end ends where an uninterrupted
run ends: same rows after the resume point, same final weights, same stopping epoch and rates —
so model, optimizer, batch-norm statistics, dropout randomness, early-stopping and plateau
state all travel through the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.worker.training.inprocess import KillBefore, Killed, make_spec, run_spec

pytestmark = [pytest.mark.torch, pytest.mark.tf]

FIELDS: dict[str, Any] = {
    "dataset": {"name": "digits", "limit": 500},
    "model": {"hidden_units": [32], "dropout": 0.2, "batch_norm": True},
    "training": {"epochs": 8, "batch_size": 32},
    # min_delta 10: no epoch after the first counts as better, so early stopping waits out its
    # patience (stop at epoch 4) and the plateau schedule halves the rate every epoch after 1.
    "early_stopping": {"patience": 3, "min_delta": 10.0, "restore_best_weights": True},
    "lr_scheduler": {"name": "reduce_on_plateau", "patience": 0, "factor": 0.5, "min_delta": 10},
}
KEYS = ["train_loss", "train_accuracy", "val_loss", "val_accuracy", "learning_rate"]
# The same network as a graph whose nodes train at their own rates: the optimizer's parameter
# groups (PyTorch) and per-variable rates (TensorFlow) go through the checkpoint too.
MULTIPLIED = {
    "type": "graph",
    "layers": [
        {"name": "flat", "op": "flatten"},
        {"name": "d1", "op": "dense", "units": 32, "lr_multiplier": 0.1},
        {"name": "bn", "op": "batch_norm", "lr_multiplier": 3.0},
        {"name": "act", "op": "activation", "fn": "relu"},
        {"name": "drop", "op": "dropout", "rate": 0.2},
    ],
}


@pytest.mark.parametrize("model", [FIELDS["model"], MULTIPLIED], ids=["mlp", "lr-multiplier"])
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_resume_after_a_kill_ends_like_an_uninterrupted_run(
    framework: str, model: dict[str, Any], tmp_path: Path
) -> None:
    spec = make_spec(framework, **{**FIELDS, "model": model})
    whole = run_spec(spec, tmp_path / "whole")
    assert whole.outcome.stop_reason == "early_stopping" and len(whole.rows) == 4

    with pytest.raises(Killed):
        run_spec(spec, tmp_path / "killed", KillBefore(3))
    resumed = run_spec(spec, tmp_path / "killed")  # a fresh back-end, as a new attempt

    assert [row["epoch"] for row in resumed.rows] == [3.0, 4.0]
    for a, b in zip(whole.rows[2:], resumed.rows, strict=True):
        assert [a[k] for k in KEYS] == pytest.approx([b[k] for k in KEYS], rel=1e-5)
    assert resumed.outcome.stop_reason == "early_stopping"
    assert resumed.state.best_epoch == whole.state.best_epoch == 1
    assert resumed.outcome.result["restored_best_weights"] is True
    for a, b in zip(whole.weights, resumed.weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert resumed.outcome.result["val_loss"] == pytest.approx(whole.outcome.result["val_loss"])
