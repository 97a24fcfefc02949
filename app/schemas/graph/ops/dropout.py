"""dropout: zero a fraction of the values while training (scaled up to keep the mean)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.schemas.graph.base import Op, TensorType


class Dropout(Op):
    """Inverted dropout while training; nothing at inference (model.onnx has no node for it)."""

    op: Literal["dropout"] = "dropout"
    rate: float = Field(ge=0.0, le=0.9, allow_inf_nan=False, description="fraction dropped")

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (1, 2, 3), "values")
        return x

    def torch_forward(self, t: Any, w: list[Any], xs: list[Any], training: bool) -> Any:
        return t.F.dropout(xs[0], self.rate, training)

    def keras_layer(self, k: Any, xs: list[TensorType]) -> Any:
        return k.layers.Dropout(self.rate)

    def onnx(self, g: Any, xs: list[str], w: list[Any], types: list[TensorType]) -> str:
        return xs[0]
