"""The model as a typed layer graph: ops in a registry (one module each), the graph spec,
its templates (mlp, cnn), and a graph built for one input with its summary."""

from app.schemas.graph.base import GraphError, Op, TensorType, Variable
from app.schemas.graph.model import INPUT, BuiltGraph, BuiltNode, GraphSpec, build
from app.schemas.graph.registry import OPS
from app.schemas.graph.templates import CNNSpec, MLPSpec

__all__ = [
    "INPUT",
    "OPS",
    "BuiltGraph",
    "BuiltNode",
    "CNNSpec",
    "GraphError",
    "GraphSpec",
    "MLPSpec",
    "Op",
    "TensorType",
    "Variable",
    "build",
]
