"""lstm: a long short-term memory layer (Keras' LSTM; gates i, f, c, o in its layout)."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from app.schemas.graph.base import TensorType, Variable
from app.schemas.graph.kits import T, TorchKit
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

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        # PyTorch's own LSTM kernel (oneDNN's on a CPU) on these very tensors: its gates are
        # Keras' i, f, c, o in the same order, and its cell computes the same c and h. It
        # keeps a second bias, the recurrent one, here zeros.
        x = xs[0]
        kernel, recurrent, bias = w
        zeros = x.new_zeros((1, x.shape[0], self.units))
        params = [kernel.t(), recurrent.t(), bias, bias.new_zeros(bias.shape)]
        out, _, _ = t.torch.lstm(x, (zeros, zeros), params, True, 1, 0.0, training, False, True)
        return out if self.return_sequences else out[:, -1]

    def onnx_weights(self, w: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        u = self.units
        kernel, recurrent, bias = (gate_blocks(a, ONNX_ORDER, u) for a in w)
        biases = np.concatenate([bias, np.zeros_like(bias)])  # [Wb, Rb]: Keras has one
        return kernel.T[None], recurrent.T[None], biases[None]
