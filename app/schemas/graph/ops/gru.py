"""gru: a gated recurrent unit (Keras' GRU with reset_after; gates z, r, h in its layout)."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from app.schemas.graph.base import TensorType, Variable
from app.schemas.graph.kits import OnnxAttribute, T, TorchKit
from app.schemas.graph.ops._recurrent import Recurrent

TORCH_ORDER = (1, 0, 2)  # Keras' z, r, h as PyTorch's r, z, n


class GRU(Recurrent):
    """Keras' GRU over (steps, features), reset gate after the recurrent matmul (its
    default); the last step's output (units,), or every step's (steps, units)."""

    # h = z*h + (1-z)*tanh(x_h + r*(h @ U_h + b_h)): Keras' reset_after is ONNX's
    # linear_before_reset; bias [2, 3u] holds the input and the recurrent bias
    op: Literal["gru"] = "gru"
    gates: ClassVar[int] = 3
    states: ClassVar[int] = 1
    # PyTorch's GRU kernel and Keras' GRU keep fewer per step than lstm's
    kept_per_step: ClassVar[dict[str, float]] = {"pytorch": 6.0, "tensorflow": 6.0}
    keras_class: ClassVar[str] = "GRU"
    onnx_op: ClassVar[str] = "GRU"
    onnx_attrs: ClassVar[dict[str, OnnxAttribute]] = {"linear_before_reset": 1}

    def bias(self, xs: list[TensorType]) -> Variable:
        return Variable("bias", (2, 3 * self.units), "zeros")

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        # PyTorch's own GRU kernel on these tensors, gate blocks reordered (a copy of the
        # weights, small beside the recurrence): its n = tanh(W_n x + b_in + r*(U_n h +
        # b_hn)) is Keras' reset_after, and h = (1-z)*n + z*h its update.
        x = xs[0]
        kernel, recurrent, bias = (torch_gates(t, a) for a in w)
        zeros = x.new_zeros((1, x.shape[0], self.units))
        params = [kernel.t(), recurrent.t(), bias[0], bias[1]]
        out, _ = t.torch.gru(x, zeros, params, True, 1, 0.0, training, False, True)
        return out if self.return_sequences else out[:, -1]

    def onnx_weights(self, w: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        kernel, recurrent, bias = w  # Keras' z, r, h is ONNX's order too
        return kernel.T[None], recurrent.T[None], bias.reshape(1, -1)


def torch_gates(t: TorchKit[T], a: T) -> T:
    """The last axis's three gate blocks in PyTorch's order."""
    blocks = a.chunk(3, dim=-1)
    return t.torch.cat([blocks[k] for k in TORCH_ORDER], dim=-1)
