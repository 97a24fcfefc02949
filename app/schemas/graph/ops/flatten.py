"""flatten: one sample's values in one row, in channels-last order."""

from __future__ import annotations

from typing import Any, Literal

from app.schemas.graph.base import Op, TensorType


class Flatten(Op):
    """(…) -> (size,); the order is channels last in every back-end and in model.onnx."""

    op: Literal["flatten"] = "flatten"

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (1, 2, 3), "values")
        return TensorType((x.size,))

    def torch_forward(self, t: Any, w: list[Any], xs: list[Any], training: bool) -> Any:
        return xs[0].flatten(1)

    def keras_layer(self, k: Any, xs: list[TensorType]) -> Any:
        return k.layers.Flatten()

    def onnx(self, g: Any, xs: list[str], w: list[Any], types: list[TensorType]) -> str:
        return g.op("Flatten", [xs[0]], axis=1)
