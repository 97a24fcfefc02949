"""The image-accuracy benchmark in its tiny run (200 training and 200 test PNG files, 1 epoch
a framework): the folders are written and ingested, both frameworks train on them through the
worker's attempt code, and every figure is printed: a test accuracy per epoch and a final one,
samples/s, the epoch's wall time and input wait. Accuracy is only checked to be a fraction:
one epoch on 200 images says nothing about the goal. The runner offers it as
`--only image_accuracy`, with its epochs and image count."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_module

pytestmark = [pytest.mark.torch, pytest.mark.tf, pytest.mark.timeout(900)]


def test_a_tiny_run_scores_both_frameworks_on_the_test_pngs() -> None:
    out = run_module("benchmarks.training.image_accuracy", "--tiny")
    assert out.returncode == 0, out.stderr[-3000:]
    bench = dict(re.findall(r"^BENCH (image_accuracy_\w+) (\S+) ", out.stdout, re.MULTILINE))
    figures = ("test_accuracy", "samples_per_s", "epoch_s")
    frameworks = ("pytorch", "tensorflow")
    assert set(bench) == {"image_accuracy_ingest_images_per_s"} | {
        f"image_accuracy_{f}_{figure}" for f in frameworks for figure in figures
    }
    assert all(float(v) > 0 for k, v in bench.items() if not k.endswith("test_accuracy"))
    for framework in frameworks:
        assert 0 <= float(bench[f"image_accuracy_{framework}_test_accuracy"]) <= 1
    assert "200 train and 200 test, epochs: 1," in out.stdout
    rows = re.findall(r"^(pytorch|tensorflow) (epoch 1|final) +(\d\.\d{4}) ", out.stdout, re.M)
    assert [(f, run) for f, run, _ in rows] == [
        (f, run) for f in frameworks for run in ("epoch 1", "final")
    ]
    # One epoch: its test accuracy is the final model's, scored once after the epoch, once
    # after the export.
    assert rows[0][2] == rows[1][2] and rows[2][2] == rows[3][2]
    assert re.search(r"^pytorch final .* >= 0\.935 (pass|below)$", out.stdout, re.M)


def test_the_runner_offers_it_with_its_epochs_and_images() -> None:
    out = run_module("benchmarks", "--help", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "image_accuracy" in out.stdout
    assert "--images" in out.stdout and "--epochs" in out.stdout
