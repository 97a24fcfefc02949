"""TensorFlow's mixed_bfloat16 policy against float32 through the worker: its tiny run trains
both precisions and prints their row. No timing is asserted."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_module

pytestmark = pytest.mark.tf


def test_a_tiny_run_prints_both_precisions_and_their_ratio() -> None:
    out = run_module("benchmarks.training.tf_precision", "--tiny", "--cpu-time", timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    row = re.search(r"^resnet +([\d,]+) +([\d,]+) +(\d+\.\d\d)$", out.stdout, re.MULTILINE)
    assert row is not None, out.stdout[-2000:]
    fp32, bf16 = (float(row[i].replace(",", "")) for i in (1, 2))
    assert fp32 > 0 and bf16 > 0
    assert float(row[3]) == pytest.approx(bf16 / fp32, abs=0.01)
    assert out.stdout.count("BENCH tf_precision_resnet_") == 3
