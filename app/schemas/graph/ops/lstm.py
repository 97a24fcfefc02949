"""lstm: a long short-term memory layer (Keras' LSTM; gates i, f, c, o in its layout)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np

from app.schemas.graph.base import TensorType, Variable
from app.schemas.graph.ops._recurrent import Recurrent, gate_blocks

ONNX_ORDER = (0, 3, 1, 2)  # Keras' i, f, c, o as ONNX's i, o, f, c


class LSTM(Recurrent):
    """Keras' LSTM over (steps, features): tanh, sigmoid gates, the forget gate's bias
    starting at 1; the last step's output (units,), or every step's (steps, units)."""

    # c = f*c + i*tanh(z_c), h = o*tanh(c); bias [4u] holds Keras' single bias
    op: Literal["lstm"] = "lstm"
    gates: ClassVar[int] = 4
    states: ClassVar[int] = 2
    keras_class: ClassVar[str] = "LSTM"
    onnx_op: ClassVar[str] = "LSTM"

    def bias(self, xs: list[TensorType]) -> Variable:
        return Variable("bias", (4 * self.units,), "forget_bias")

    def input_bias(self, bias: Any) -> Any:
        return bias

    def cell(self, t: Any, projected: Any, state: tuple[Any, ...], w: list[Any]) -> tuple:
        h, c = state
        i, f, candidate, o = (projected + h @ w[1]).chunk(4, dim=-1)
        c = t.torch.sigmoid(f) * c + t.torch.sigmoid(i) * t.torch.tanh(candidate)
        return t.torch.sigmoid(o) * t.torch.tanh(c), c

    def onnx_weights(self, w: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        u = self.units
        kernel, recurrent, bias = (gate_blocks(a, ONNX_ORDER, u) for a in w)
        biases = np.concatenate([bias, np.zeros_like(bias)])  # [Wb, Rb]: Keras has one
        return kernel.T[None], recurrent.T[None], biases[None]
