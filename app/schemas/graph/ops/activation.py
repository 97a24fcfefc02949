"""activation: an element-wise non-linearity."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit

Activation = Literal["relu", "gelu", "tanh", "sigmoid", "silu"]
# Elements a function costs per value (for FLOPs; a rough count of its arithmetic).
COST = {"relu": 1, "gelu": 8, "tanh": 4, "sigmoid": 4, "silu": 5}


class ActivationOp(Op):
    """relu, gelu (the exact erf form, as Keras' default), tanh, sigmoid or silu."""

    op: Literal["activation"] = "activation"
    fn: Activation = Field(description="the function")

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (1, 2, 3), "values")
        return x

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        return COST[self.fn] * out.size

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        fns = {
            "relu": t.F.relu,
            "gelu": t.F.gelu,
            "tanh": t.F.tanh,
            "sigmoid": t.F.sigmoid,
            "silu": t.F.silu,
        }
        return fns[self.fn](xs[0])

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.Activation(self.fn)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        x = xs[0]
        if self.fn == "gelu":  # opset 17 has no Gelu: x * 0.5 * (1 + erf(x / sqrt(2)))
            scaled = g.op("Div", [x, g.const(np.float32(math.sqrt(2.0)), "sqrt2")])
            one = g.op("Add", [g.op("Erf", [scaled]), g.const(np.float32(1.0), "one")])
            return g.op("Mul", [g.op("Mul", [x, one]), g.const(np.float32(0.5), "half")])
        if self.fn == "silu":
            return g.op("Mul", [x, g.op("Sigmoid", [x])])
        return g.op({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}[self.fn], [x])
