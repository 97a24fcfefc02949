"""global_avg_pool: the mean over every step or pixel, one value per channel."""

from __future__ import annotations

from typing import Literal

import numpy as np

from app.schemas.graph.base import KerasKit, Op, TensorType
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit


class GlobalAvgPool(Op):
    """(steps, C) or (H, W, C) -> (C,): Keras' GlobalAveragePooling1D / 2D."""

    op: Literal["global_avg_pool"] = "global_avg_pool"

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (2, 3), "a sequence (steps, C) or an image (H, W, C)")
        return TensorType((x.shape[-1],))

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        return xs[0].size

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        x = xs[0]
        return x.mean(dim=tuple(range(1, x.ndim - 1)))

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        if len(xs[0].shape) == 2:  # a sequence
            return k.layers.GlobalAveragePooling1D()
        return k.layers.GlobalAveragePooling2D()

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        axes = list(range(1, len(types[0].shape)))  # every axis but the batch and channels
        return g.op("ReduceMean", [xs[0]], axes=axes, keepdims=0)
