"""concat: two or more inputs side by side along the channel (last) axis."""

from __future__ import annotations

from typing import Any, Literal

from app.schemas.graph.base import JoinOp, TensorType


class Concat(JoinOp):
    """Inputs joined on the last axis; every other axis must match."""

    op: Literal["concat"] = "concat"

    def infer(self, xs: list[TensorType]) -> TensorType:
        self.values_in(xs)
        if len({x.shape[:-1] for x in xs}) > 1:
            raise self.fail(f"inputs differ before the last axis: {', '.join(map(str, xs))}")
        return TensorType((*xs[0].shape[:-1], sum(x.shape[-1] for x in xs)))

    def torch_forward(self, t: Any, w: list[Any], xs: list[Any], training: bool) -> Any:
        return t.torch.cat(xs, dim=-1)

    def keras_layer(self, k: Any, xs: list[TensorType]) -> Any:
        return k.layers.Concatenate(axis=-1)

    def onnx(self, g: Any, xs: list[str], w: list[Any], types: list[TensorType]) -> str:
        return g.op("Concat", xs, axis=-1)
