"""The graph-model-against-hand benchmark: the hand-written networks are the examples' networks
(their parameters), its tiny run prints a row per network and precision (the median ratio and
its spread), the job-through-the-worker comparison's tiny run a row per precision, and the
runner offers both as `--only hand_written`. No timing is asserted."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_module

pytestmark = pytest.mark.torch


def parameters(model: object) -> int:
    return sum(p.numel() for p in model.parameters())  # type: ignore[attr-defined]


@pytest.mark.parametrize("network", ["resnet", "mlp", "row_lstm", "row_gru"])
def test_the_hand_network_has_the_graph_models_parameters(network: str) -> None:
    from benchmarks.training.hand_written import models

    built = models(network)
    hand, graph = parameters(built["hand"][0]), parameters(built["graph"][0])
    # nn.LSTM keeps a second bias (4 gates x 128 units) where the graph, as Keras, keeps one.
    assert hand == graph + (4 * 128 if network == "row_lstm" else 0)


def test_a_tiny_run_prints_a_row_per_network_and_precision() -> None:
    out = run_module("benchmarks.training.hand_written", "--tiny", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    number, spread = r"[\d,]+", r"\d+\.\d\d-\d+\.\d\d"
    rows = re.findall(
        rf"^(resnet|mlp|row_lstm|row_gru) +(fp32|bf16) +{number} +{number} +(\d+\.\d\d)"
        rf" +{spread}$",
        out.stdout,
        re.MULTILINE,
    )
    assert [(n, p) for n, p, _ in rows] == [
        (n, p) for n in ("resnet", "mlp", "row_lstm", "row_gru") for p in ("fp32", "bf16")
    ]
    assert all(float(ratio) > 0 for _, _, ratio in rows)
    assert out.stdout.count("BENCH hand_written_") == 8 * 5  # 2 speeds, ratio, p25, p75


def test_a_tiny_job_loop_run_prints_a_row_per_precision() -> None:
    out = run_module("benchmarks.training.job_loop", "--tiny", "--cpu-time", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    number = r"[\d,]+"
    rows = re.findall(
        rf"^resnet +(fp32|bf16) +{number} +{number} +(\d+\.\d\d)$", out.stdout, re.MULTILINE
    )
    assert [p for p, _ in rows] == ["fp32", "bf16"]
    assert all(float(ratio) > 0 for _, ratio in rows)
    assert out.stdout.count("BENCH job_loop_resnet_") == 2 * 3
    assert "CPU time" in out.stdout


def test_the_runner_offers_it() -> None:
    out = run_module("benchmarks", "--help", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "hand_written" in out.stdout
