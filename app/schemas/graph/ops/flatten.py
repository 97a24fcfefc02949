"""flatten: one sample's values in one row, in channels-last order."""

from __future__ import annotations

from typing import Literal

import numpy as np

from app.schemas.graph.base import KerasKit, Op, TensorType
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit


class Flatten(Op):
    """(…) -> (size,); the order is channels last in every back-end and in model.onnx."""

    op: Literal["flatten"] = "flatten"

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (1, 2, 3), "values")
        return TensorType((x.size,))

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        return xs[0].flatten(1)

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.Flatten()

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        return g.op("Flatten", [xs[0]], axis=1)
