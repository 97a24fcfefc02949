"""The job's graph as a Keras functional model: a layer per node, each asked of its op.

Keras' own layers where one exists (their weights are the op's variables, in order, which is
checked here); ops without one run through OpLayer, which creates the op's variables and calls
its keras_forward. The graph's variables are collected node by node, not from model.weights,
so their order is the graph's whatever Keras does with nested layers.
"""

from __future__ import annotations

from typing import Any

import keras
from pydantic import TypeAdapter

from app.schemas.graph import INPUT, BuiltGraph, Op, TensorType
from app.schemas.graph.base import KerasKit
from app.schemas.graph.kits import KerasTensor
from app.schemas.graph.registry import Node

NODE = TypeAdapter(Node)


@keras.saving.register_keras_serializable(package="epochal")
class OpLayer(keras.layers.Layer):
    """A node whose op computes itself in keras.ops, on variables the op describes."""

    def __init__(self, op: Op, types: list[TensorType], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.op, self.types = op, types
        self.vars = [
            self.add_weight(shape=v.shape, name=v.name, trainable=v.trainable, initializer="zeros")
            for v in op.variables(types)
        ]

    def call(self, inputs: Any, training: bool = False) -> Any:
        xs = list(inputs) if isinstance(inputs, list | tuple) else [inputs]
        return self.op.keras_forward(KIT, self.vars, xs, bool(training) and self.trainable)

    def get_config(self) -> dict[str, Any]:
        types = [[list(t.shape), t.tokens, t.vocab] for t in self.types]
        return {**super().get_config(), "op": self.op.model_dump(mode="json"), "types": types}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> OpLayer:
        op = NODE.validate_python(config.pop("op"), strict=False)
        types = [TensorType(tuple(s), tok, vocab) for s, tok, vocab in config.pop("types")]
        return cls(op, types, **config)


class _KerasKit:
    """What an op's keras_layer / keras_forward gets. Keras ships no types, so its tensors are
    the kit's KerasTensor Protocol: the ops' code is checked against what they may use."""

    layers = keras.layers
    ops = keras.ops
    OpLayer = OpLayer


KIT: KerasKit[KerasTensor] = _KerasKit()


def build_model(graph: BuiltGraph) -> tuple[keras.Model, list[keras.Variable]]:
    """The functional model (logits out) and its variables in the graph's order."""
    dtype = "int32" if graph.input.tokens else "float32"
    inputs = keras.Input(shape=graph.input.shape, dtype=dtype)
    values = {INPUT: inputs}
    variables: list[keras.Variable] = []
    for node in graph.nodes:
        layer = node.op.keras_layer(KIT, list(node.types))
        layer.name = node.name  # stable names: checkpoints match across processes
        args = [values[name] for name in node.inputs]
        values[node.name] = layer(args if node.op.arity[1] > 1 else args[0])
        if not node.op.trainable:  # frozen: out of trainable_variables; batch norm infers
            layer.trainable = False
        expected = [v.shape for v in node.variables()]
        got = [tuple(w.shape) for w in layer.weights]
        if got != expected:
            raise RuntimeError(f"{node.op.op} {node.name!r}: Keras made {got}, not {expected}")
        variables += layer.weights
    return keras.Model(inputs, values[graph.output]), variables
