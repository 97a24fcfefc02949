"""concat: two or more inputs side by side along the channel (last) axis."""

from __future__ import annotations

from typing import Literal

import numpy as np

from app.schemas.graph.base import JoinOp, KerasKit, TensorType
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit


class Concat(JoinOp):
    """Inputs joined on the last axis; every other axis must match."""

    op: Literal["concat"] = "concat"

    def infer(self, xs: list[TensorType]) -> TensorType:
        self.values_in(xs)
        if len({x.shape[:-1] for x in xs}) > 1:
            raise self.fail(f"inputs differ before the last axis: {', '.join(map(str, xs))}")
        return TensorType((*xs[0].shape[:-1], sum(x.shape[-1] for x in xs)))

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        return t.torch.cat(xs, dim=-1)

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.Concatenate(axis=-1)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        return g.op("Concat", xs, axis=-1)
