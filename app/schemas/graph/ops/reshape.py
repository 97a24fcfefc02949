"""reshape: the same values in another per-sample shape (an image as a sequence of rows)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit


class Reshape(Op):
    """(…) -> shape, row-major over channels-last values (Keras' Reshape)."""

    op: Literal["reshape"] = "reshape"
    shape: list[Annotated[int, Field(ge=1, le=1_048_576)]] = Field(
        min_length=1, max_length=3, description="the new per-sample shape, e.g. [28, 28]"
    )

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        if x.tokens and len(self.shape) != 1:
            raise self.fail(f"token ids {x} can only be reshaped to one axis")
        if math.prod(self.shape) != x.size:
            raise self.fail(
                f"shape {tuple(self.shape)} holds {math.prod(self.shape)} values; "
                f"its input {x} holds {x.size}"
            )
        return TensorType(tuple(self.shape), x.tokens, x.vocab)

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        return xs[0].reshape(xs[0].shape[0], *self.shape)

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.Reshape(tuple(self.shape))

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        target = g.const(np.array([-1, *self.shape], np.int64), "shape")
        return g.op("Reshape", [xs[0], target])
