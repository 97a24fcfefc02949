"""add: the element-wise sum of two or more inputs of one shape (a residual connection)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from app.schemas.graph.base import JoinOp, KerasKit, TensorType
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit


class Add(JoinOp):
    """Sum of its inputs, which must all have the same shape."""

    op: Literal["add"] = "add"

    def infer(self, xs: list[TensorType]) -> TensorType:
        self.values_in(xs)
        if len({x.shape for x in xs}) > 1:
            raise self.fail(f"inputs of different shapes: {', '.join(map(str, xs))}")
        return xs[0]

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        return (len(xs) - 1) * out.size

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.Add()

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        total = xs[0]
        for x in xs[1:]:
            total = g.op("Add", [total, x])
        return total
