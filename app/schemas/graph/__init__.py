"""The model as a typed layer graph: ops in a registry (one module each), the graph spec,
its templates (mlp, cnn), and a graph built for one input with its summary.

Adding an op is adding one module to `ops/` (the registry finds it; modules starting with `_`
are shared helpers) whose `Op` subclass sets `op` to a Literal and declares bounded fields with
descriptions (OpenAPI and README's generated reference list them), and implements `infer`
(failing through `self.fail`, which names the layer), `variables` (Keras layout), `flops`, and
its PyTorch, Keras and ONNX builds from the kits the back-ends hand in (typed by kits.py's
Protocols, which mypy checks the builds against); it imports no framework. Its case in
tests/worker/training/op_cases.py is required: test_ops.py checks every registered op in both
frameworks and in ONNX Runtime.
"""

from app.schemas.graph.base import (
    INITIALIZER_NAMES,
    GraphError,
    InitializerName,
    Op,
    TensorType,
    Variable,
)
from app.schemas.graph.model import INPUT, BuiltGraph, BuiltNode, GraphSpec, build
from app.schemas.graph.registry import OPS
from app.schemas.graph.templates import CNNSpec, MLPSpec

__all__ = [
    "INITIALIZER_NAMES",
    "INPUT",
    "OPS",
    "BuiltGraph",
    "BuiltNode",
    "CNNSpec",
    "GraphError",
    "GraphSpec",
    "InitializerName",
    "MLPSpec",
    "Op",
    "TensorType",
    "Variable",
    "build",
]
