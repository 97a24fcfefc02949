"""The warm-start benchmark end to end in its tiny mode (a few hundred images, 1 epoch a job,
two seeds): both frameworks report every seed's curves and their mean and spread, and the
frozen stem and stage 1 come out of each fine-tune bit for bit as the source job left them.
Accuracy is not checked: 1 epoch on 180 images says nothing about it."""

from __future__ import annotations

import json

import pytest

from benchmarks.training.warm_start import TINY
from tests.helpers import run_module

pytestmark = [pytest.mark.torch, pytest.mark.tf, pytest.mark.timeout(900)]


def test_tiny_run_reports_every_seeds_curves_and_frozen_variables_unchanged() -> None:
    out = run_module("benchmarks.training.warm_start", "--tiny")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    results = json.loads(lines[-1].removeprefix("RESULT "))["warm_start"]
    assert set(results) == {"pytorch", "tensorflow"}
    for framework, result in results.items():
        assert len(result["source"]) == TINY.source_epochs, (framework, result)
        assert [run["seed"] for run in result["runs"]] == list(TINY.seeds), (framework, result)
        for curve in ("warm", "scratch"):
            values = [run[curve][0] for run in result["runs"]]
            assert all(0.0 <= v <= 1.0 for v in values), (framework, curve, result)
            spread = result[curve]
            assert spread["low"] == [min(values)] and spread["high"] == [max(values)], result
            assert spread["mean"][0] == pytest.approx(sum(values) / len(values)), result
        assert result["margins"] == []  # one epoch: no scratch epoch 2 to compare with
        assert result["warm_epoch1_reaches_scratch_epoch2"] is None
        assert result["frozen_identical"] is True, (framework, result)
        assert all(run["frozen_identical"] for run in result["runs"]), (framework, result)
        # stem, bn0 (4 variables), s1c1, s1bn1, s1c2, s1bn2: kernels, biases, bn statistics
        assert result["frozen_variables"] == 18, (framework, result)
    assert "warm epoch 1 >= scratch epoch 2" in out.stdout
