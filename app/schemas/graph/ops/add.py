"""add: the element-wise sum of two or more inputs of one shape (a residual connection)."""

from __future__ import annotations

from typing import Any, Literal

from app.schemas.graph.base import JoinOp, TensorType


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

    def torch_forward(self, t: Any, w: list[Any], xs: list[Any], training: bool) -> Any:
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total

    def keras_layer(self, k: Any, xs: list[TensorType]) -> Any:
        return k.layers.Add()

    def onnx(self, g: Any, xs: list[str], w: list[Any], types: list[TensorType]) -> str:
        total = xs[0]
        for x in xs[1:]:
            total = g.op("Add", [total, x])
        return total
