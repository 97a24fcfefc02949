"""The warm-start benchmark end to end in its tiny mode (a few hundred images, 1 epoch a job):
both frameworks report their curves, and the frozen stem and stage 1 come out of fine-tuning
bit for bit as the source job left them. Accuracy is not checked: 1 epoch on 240 images says
nothing about it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = [pytest.mark.torch, pytest.mark.tf, pytest.mark.timeout(900)]


def test_tiny_run_reports_both_curves_and_frozen_variables_unchanged() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.training.warm_start", "--tiny"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    results = json.loads(lines[-1].removeprefix("RESULT "))["warm_start"]
    assert set(results) == {"pytorch", "tensorflow"}
    for framework, result in results.items():
        for curve in ("source", "warm", "scratch"):
            assert len(result[curve]) == 1, (framework, curve, result)
            assert 0.0 <= result[curve][0] <= 1.0, (framework, curve, result)
        assert result["warm_epoch1_reaches_scratch_epoch2"] is None  # one epoch: no epoch 2
        assert result["frozen_identical"] is True, (framework, result)
        # stem, bn0 (4 variables), s1c1, s1bn1, s1c2, s1bn2: kernels, biases, bn statistics
        assert result["frozen_variables"] == 18, (framework, result)
    assert "warm epoch 1 >= scratch epoch 2" in out.stdout
