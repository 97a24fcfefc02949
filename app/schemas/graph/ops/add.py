"""add: the element-wise sum of two or more inputs of one shape (a residual connection)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from app.schemas.graph.base import MAX_INPUTS, Op, TensorType


class Add(Op):
    """Sum of its inputs, which must all have the same shape."""

    op: Literal["add"] = "add"
    inputs: list[str] | None = Field(
        None, min_length=2, max_length=MAX_INPUTS, description="two or more earlier nodes"
    )
    arity: ClassVar[tuple[int, int]] = (2, MAX_INPUTS)

    def infer(self, xs: list[TensorType]) -> TensorType:
        for x in xs:
            self.needs_rank(x, (1, 2, 3), "values")
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
