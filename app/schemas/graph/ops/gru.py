"""gru: a gated recurrent unit (Keras' GRU with reset_after; gates z, r, h)."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from app.schemas.graph.base import TensorType, Variable
from app.schemas.graph.kits import OnnxAttribute, T, TorchKit
from app.schemas.graph.ops._recurrent import Recurrent


class GRU(Recurrent):
    """Keras' GRU over (steps, features), reset gate after the recurrent matmul (its
    default); the last step's output (units,), or every step's (steps, units)."""

    # h = z*h + (1-z)*tanh(x_h + r*(h @ U_h + b_h)): Keras' reset_after is ONNX's
    # linear_before_reset; bias [2, 3u] holds the input and the recurrent bias
    op: Literal["gru"] = "gru"
    gates: ClassVar[int] = 3
    states: ClassVar[int] = 1
    # PyTorch's loop keeps more per step than lstm's; Keras' GRU fewer
    kept_per_step: ClassVar[dict[str, float]] = {"pytorch": 9.0, "tensorflow": 6.0}
    keras_class: ClassVar[str] = "GRU"
    onnx_op: ClassVar[str] = "GRU"
    onnx_attrs: ClassVar[dict[str, OnnxAttribute]] = {"linear_before_reset": 1}

    def bias(self, xs: list[TensorType]) -> Variable:
        return Variable("bias", (2, 3 * self.units), "zeros")

    def input_bias(self, bias: T) -> T:
        return bias[0]

    def cell(self, t: TorchKit[T], projected: T, state: tuple[T, ...], w: list[T]) -> tuple[T, ...]:
        (h,) = state
        x_z, x_r, x_h = projected.chunk(3, dim=-1)
        h_z, h_r, h_h = (h @ w[1] + w[2][1]).chunk(3, dim=-1)
        z, r = t.torch.sigmoid(x_z + h_z), t.torch.sigmoid(x_r + h_r)
        return (z * h + (1 - z) * t.torch.tanh(x_h + r * h_h),)

    def onnx_weights(self, w: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        kernel, recurrent, bias = w  # Keras' z, r, h is ONNX's order too
        return kernel.T[None], recurrent.T[None], bias.reshape(1, -1)
