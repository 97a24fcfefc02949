"""The image-loader benchmark: its tiny run writes JPEG files, ingests them, and prints every
figure with its goal; the runner offers it as `--only image_loader`. The one bar asserted is
the loader against the model, whose margin is orders of magnitude (the loader reads decoded
records; the model convolves them), so a slow or loaded machine does not move it under 2x."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_module

pytestmark = pytest.mark.torch


def test_a_tiny_run_prints_every_figure_with_its_goal() -> None:
    out = run_module("benchmarks.training.image_loader", "--tiny", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    bench = dict(re.findall(r"^BENCH (image_loader_\w+) (\S+) ", out.stdout, re.MULTILINE))
    assert set(bench) == {
        "image_loader_ingest_images_per_s",
        "image_loader_samples_per_s",
        "image_loader_model_samples_per_s",
        "image_loader_vs_model_x",
        "image_loader_first_batch_s",
        "image_loader_first_batch_bigger_s",
        "image_loader_train_samples_per_s",
        "image_loader_wait_share",
    }
    assert all(float(v) > 0 for k, v in bench.items() if k != "image_loader_wait_share")
    assert 0 <= float(bench["image_loader_wait_share"]) < 1
    ratio = float(bench["image_loader_vs_model_x"])
    speeds = float(bench["image_loader_samples_per_s"]) / float(
        bench["image_loader_model_samples_per_s"]
    )
    assert ratio == pytest.approx(speeds, rel=1e-4)
    assert ratio >= 2
    named = r"loader / model|first batch, [\d,]+ images|input wait after epoch 1"
    rows = re.findall(rf"^({named}) .*(>= 2x|<= 10 s|<= 5 %) +(pass|FAIL)$", out.stdout, re.M)
    assert [name for name, _, _ in rows] == [
        "loader / model",
        "first batch, 300 images",
        "first batch, 3,000 images",
        "input wait after epoch 1",
    ]
    assert rows[0][2] == "pass"


def test_the_runner_offers_it() -> None:
    out = run_module("benchmarks", "--help", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "image_loader" in out.stdout
