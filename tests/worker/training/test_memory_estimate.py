"""The memory estimate per op against what a real PyTorch training step takes: each op at three
sizes, one step of a batch of 64 in a process of its own (tests/worker/training/memory_probe),
its peak resident memory above the step's start. The estimate (app.domain.cost: twice what
the graph keeps per sample, times the batch) lies within 0.5×–2× of it. An op that counted
its output only (a recurrence over 200 steps, a feed-forward 64 times its width) was 10 to
100 times under."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from app.domain.cost import FLOAT32
from app.schemas.graph import TensorType, build
from app.schemas.graph.model import GraphSpec
from tests.helpers import ROOT

pytestmark = pytest.mark.torch
BATCH = 64


def recurrent(op: str, units: int, steps: int, sequences: bool = False) -> Any:
    layer = {"name": "r", "op": op, "units": units, "return_sequences": sequences}
    return [layer], [steps, 8]


def encoder(steps: int, dim: int, heads: int, ff_dim: int) -> Any:
    layer = {"name": "t", "op": "transformer_encoder", "heads": heads, "dim": dim}
    return [{**layer, "ff_dim": ff_dim}], [steps, dim]


def concat(width: int, copies: int) -> Any:
    dense = {"name": "d", "op": "dense", "units": width}
    return [dense, {"name": "c", "op": "concat", "inputs": ["d"] * copies}], [16]


CASES = {
    "lstm 32 units, 50 steps": recurrent("lstm", 32, 50),
    "lstm 64 units, 100 steps, every step out": recurrent("lstm", 64, 100, True),
    "lstm 128 units, 200 steps": recurrent("lstm", 128, 200),
    "gru 32 units, 50 steps": recurrent("gru", 32, 50),
    "gru 64 units, 100 steps": recurrent("gru", 64, 100),
    "gru 128 units, 200 steps": recurrent("gru", 128, 200),
    "transformer_encoder 32 steps, dim 32, ff 64": encoder(32, 32, 2, 64),
    "transformer_encoder 128 steps, 8 heads, ff 64": encoder(128, 64, 8, 64),
    "transformer_encoder 32 steps, ff 4096": encoder(32, 64, 1, 4096),
    "concat 2 × 1024": concat(1024, 2),
    "concat 4 × 2048": concat(2048, 4),
    "concat 8 × 4096": concat(4096, 8),
}


def measured(layers: list[Any], shape: list[int]) -> int:
    """The step's peak above its start, in a fresh process (an earlier step's freed memory,
    kept by the allocator, would hide a later one's). Large blocks are mapped and unmapped
    whole, so the figure is this step's own."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    case = json.dumps({"layers": layers, "shape": shape, "batch": BATCH})
    probe = [sys.executable, "-m", "tests.worker.training.memory_probe"]
    done = subprocess.run(
        probe, input=case, capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    return int(json.loads(done.stdout)["peak"])


def estimated(layers: list[Any], shape: list[int]) -> int:
    graph = build(GraphSpec.model_validate({"layers": layers}), TensorType(tuple(shape)), 10)
    return 2 * BATCH * graph.kept_per_sample("pytorch") * FLOAT32


@pytest.mark.parametrize("name", CASES)
def test_the_estimate_lies_within_half_and_twice_a_real_steps_peak(name: str) -> None:
    layers, shape = CASES[name]
    peak, estimate = measured(layers, shape), estimated(layers, shape)
    assert 0.5 * peak <= estimate <= 2 * peak, f"{name}: estimate {estimate}, measured {peak}"
