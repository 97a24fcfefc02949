"""`epochal sweep …` as a user runs it against a live service (embedded default): submit with
a live table and a plot, list, show --json, cancel of an ended sweep, and a 422 that names the
parameter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from epochal_client.render import fmt
from tests.e2e.test_cli import epochal, service  # noqa: F401 (the module's live service)
from tests.helpers import Service

pytestmark = pytest.mark.e2e
SWEEP: dict[str, Any] = {
    "name": "cli-sweep",
    "base": {
        "framework": "pytorch",
        "dataset": {"name": "digits", "limit": 600},
        "model": {"hidden_units": [16]},
        "training": {"epochs": 2, "batch_size": 64},
    },
    "parameters": {"optimizer.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 1e-1}},
    "objective": {"metric": "val_accuracy"},
    "sampler": {"name": "random", "seed": 2},
    "pruner": {"name": "none"},
    "max_trials": 5,  # the test's --set max_trials=2 shrinks it, as a user trying a sweep does
    "max_parallel": 1,
}


def test_sweep_submit_follow_plot_list_show_cancel(service: Service, tmp_path: Path) -> None:  # noqa: F811
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump(SWEEP))
    plot = tmp_path / "sweep.png"
    shrink = ["--set", "max_trials=2", "--set", "parameters.optimizer.learning_rate.high=0.05"]
    run = epochal(service, "sweep", "submit", str(spec), *shrink, "--follow", "--plot", str(plot))
    assert run.returncode == 0, run.stdout + run.stderr
    sweep_id = run.stdout.split()[0]
    assert "succeeded, 2/2 trials" in run.stdout and "best: trial" in run.stdout
    assert plot.stat().st_size > 10_000  # a PNG with two panels, not an empty file

    listed = epochal(service, "sweep", "list")
    assert listed.returncode == 0 and sweep_id in listed.stdout and "cli-sweep" in listed.stdout
    shown = json.loads(epochal(service, "sweep", "show", sweep_id, "--json").stdout)
    assert shown["status"] == "succeeded" and [t["state"] for t in shown["trials"]] == [
        "complete",
        "complete",
    ]
    assert shown["best"]["objective"] == max(t["objective"] for t in shown["trials"])
    assert "best" in listed.stdout and fmt(shown["best"]["objective"]) in listed.stdout
    assert all(t["params"]["optimizer.learning_rate"] <= 0.05 for t in shown["trials"])

    cancel = epochal(service, "sweep", "cancel", sweep_id)
    assert cancel.returncode == 1 and "already succeeded" in cancel.stderr

    bad = tmp_path / "bad.yaml"
    typo = {"optimizer.learning_rte": {"type": "uniform", "low": 0.1, "high": 0.2}}
    bad.write_text(yaml.safe_dump({**SWEEP, "parameters": typo}))
    refused = epochal(service, "sweep", "submit", str(bad))
    assert refused.returncode == 1 and "parameters.optimizer.learning_rte" in refused.stderr
