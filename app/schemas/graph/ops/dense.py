"""dense: a fully connected layer on the last axis (per step on sequences, as Keras' Dense)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType, Variable, bias, kernel
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit


class Dense(Op):
    """y = x @ kernel + bias over the last axis."""

    op: Literal["dense"] = "dense"
    units: int = Field(ge=1, le=8192, description="output width")

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (1, 2, 3), "features, a sequence or an image")
        return TensorType((*x.shape[:-1], self.units))

    def variables(self, xs: list[TensorType]) -> list[Variable]:
        fan_in = xs[0].shape[-1]
        return [kernel("kernel", (fan_in, self.units)), bias("bias", (self.units,))]

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        return 2 * xs[0].size * self.units

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        x, (weight, bias) = xs[0], w
        if x.ndim == 2:
            # The very addmm F.linear(x, weight.t(), bias) makes of a batch of vectors, on the
            # kernel itself: under autocast F.linear would cast the transposed view, a strided
            # copy that costs about as much as the bf16 matmul at these sizes.
            return bias.addmm(x, weight)
        return t.F.linear(x, weight.t(), bias)

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.Dense(self.units)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        if len(types[0].shape) == 1:
            return g.op("Gemm", [xs[0], g.const(w[0], "kernel"), g.const(w[1], "bias")])
        return g.op(
            "Add", [g.op("MatMul", [xs[0], g.const(w[0], "kernel")]), g.const(w[1], "bias")]
        )
