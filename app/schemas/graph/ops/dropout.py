"""dropout: zero a fraction of the values while training (scaled up to keep the mean)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit


class Dropout(Op):
    """Inverted dropout while training; nothing at inference (model.onnx has no node for it)."""

    op: Literal["dropout"] = "dropout"
    rate: float = Field(ge=0.0, le=0.9, allow_inf_nan=False, description="fraction dropped")

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (1, 2, 3), "values")
        return x

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        return t.F.dropout(xs[0], self.rate, training)

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.Dropout(self.rate)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        return xs[0]
