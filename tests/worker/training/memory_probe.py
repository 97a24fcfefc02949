"""Run as a script: the peak memory of one PyTorch training step of the graph given on stdin
(JSON: layers, input shape, batch), printed as JSON (bytes above the step's start).

The first step of that batch is measured, after one of two samples for the lazy set-ups: the
allocator keeps what a step frees (a recurrence's many small per-step tensors), so a second
step, or a second graph in the same process, would reuse it unseen. One graph per process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from app.schemas.graph import TensorType, build
from app.schemas.graph.model import GraphSpec
from worker.training.torch.graph import GraphModule

STATUS = Path("/proc/self/status")


def field(name: str) -> int:
    for line in STATUS.read_text().splitlines():
        if line.startswith(name):
            return int(line.split()[1]) * 1024
    raise LookupError(name)


def step_peak(layers: list[dict[str, Any]], shape: list[int], batch: int, classes: int = 10) -> int:
    x_type = TensorType(tuple(shape))
    graph = build(GraphSpec.model_validate({"layers": layers}), x_type, classes)
    model = GraphModule(graph)
    _step(model, torch.rand(2, *shape), torch.randint(0, classes, (2,)))  # lazy set-ups
    model.zero_grad(set_to_none=False)  # the gradients held, as in training
    x, y = torch.rand(batch, *shape), torch.randint(0, classes, (batch,))
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM back to the current VmRSS
    start = field("VmRSS")
    _step(model, x, y)
    return field("VmHWM") - start


def _step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    torch.nn.functional.cross_entropy(model(x), y).backward()


def main() -> None:
    torch.set_num_threads(1)
    for line in sys.stdin:
        case = json.loads(line)
        peak = step_peak(case["layers"], case["shape"], case["batch"])
        print(json.dumps({"peak": peak}), flush=True)


if __name__ == "__main__":
    main()
