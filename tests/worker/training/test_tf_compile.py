"""Which TensorFlow steps XLA compiles: on CPU not a graph with a convolution, whose XLA
gradients were far slower than TensorFlow's own kernels (BENCHMARKS.md, graph models)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.worker.training.inprocess import backend_for, make_spec

pytestmark = pytest.mark.tf

DENSE = [{"name": "h", "op": "dense", "units": 16}]
CONV = [
    {"name": "c", "op": "conv2d", "filters": 4, "kernel_size": 3},
    {"name": "g", "op": "global_avg_pool"},
]


@pytest.mark.parametrize(("layers", "compiled"), [(DENSE, True), (CONV, False)])
def test_the_cpu_step_is_compiled_only_without_a_convolution(
    layers: list[dict[str, Any]], compiled: bool
) -> None:
    spec = make_spec("tensorflow", model={"type": "graph", "layers": layers})
    with backend_for(spec) as backend:
        graph = backend.graph  # type: ignore[attr-defined]
        assert graph.xla_on_cpu is compiled
        assert backend._chunk._jit_compile is compiled  # type: ignore[attr-defined]
