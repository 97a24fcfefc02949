"""What lstm and gru share: fields, shapes, variables in Keras' layout, the three builds.

Variables are Keras' (kernel [in, gates*units], recurrent_kernel [units, gates*units], bias),
so Keras' own layers serve the TensorFlow back-end as they are. PyTorch runs the recurrence
through its own kernels on those very tensors (torch.nn.LSTM keeps two biases, which would
change the parameter count): lstm through torch.lstm with a zero recurrent bias, gru through
torch.gru with its gate blocks reordered. ONNX has both ops; each subclass reorders its gates
into ONNX's layout.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType, Variable, kernel
from app.schemas.graph.kits import K, KerasLayer, OnnxAttribute, OnnxKit, T, TorchKit


def gate_blocks(a: np.ndarray, order: tuple[int, ...], units: int) -> np.ndarray:
    """The last axis's `units`-wide gate blocks in another order."""
    return np.concatenate([a[..., k * units : (k + 1) * units] for k in order], axis=-1)


class Recurrent(Op):
    """A recurrent layer over (steps, features): tanh, with sigmoid gates (Keras' defaults)."""

    gates: ClassVar[int] = 4  # weight blocks per matrix
    states: ClassVar[int] = 2  # tensors carried from step to step, hidden first
    # Values of `units` width each step keeps for the backward pass (gates, states and their
    # activations) in each framework, as a training step's peak measures it (tests/worker/
    # training/test_memory_estimate.py): the output alone undercounts by the number of steps.
    kept_per_step: ClassVar[dict[str, float]] = {"pytorch": 8.0, "tensorflow": 8.0}
    keras_class: ClassVar[str] = "LSTM"  # the Keras layer, in keras.layers
    onnx_op: ClassVar[str] = "LSTM"
    onnx_attrs: ClassVar[dict[str, OnnxAttribute]] = {}
    units: int = Field(ge=1, le=4096, description="width of the hidden state")
    return_sequences: bool = Field(
        False, description="every step's output (steps, units); else the last one (units,)"
    )

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (2,), "a sequence (steps, features)")
        steps = x.shape[0]
        return TensorType((steps, self.units) if self.return_sequences else (self.units,))

    def bias(self, xs: list[TensorType]) -> Variable:
        raise NotImplementedError

    def variables(self, xs: list[TensorType]) -> list[Variable]:
        width = self.gates * self.units
        return [
            kernel("kernel", (xs[0].shape[-1], width)),
            Variable("recurrent_kernel", (self.units, width), "orthogonal", decays=True),
            self.bias(xs),
        ]

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        steps, features = xs[0].shape
        matmuls = 2 * (features + self.units) * self.gates * self.units
        return steps * (matmuls + 4 * self.gates * self.units)  # + the gates' arithmetic

    def kept(self, xs: list[TensorType], out: TensorType, framework: str) -> int:
        steps = xs[0].shape[0]
        per_step = self.kept_per_step.get(framework, max(self.kept_per_step.values()))
        return out.size + int(per_step * self.units * steps)

    # -- PyTorch --------------------------------------------------------------------------
    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        """PyTorch's own kernel for the op (torch.lstm, torch.gru) on the Keras-layout
        variables: a loop of cells in Python costs several times as much per step."""
        raise NotImplementedError

    # -- Keras and ONNX -------------------------------------------------------------------
    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        layer = k.layers.GRU if self.keras_class == "GRU" else k.layers.LSTM
        # Not cuDNN's kernel: XLA cannot compile it (no CudnnRNNV3 kernel for XLA_GPU_JIT, as
        # keras-team/keras#18456 reports), and the back-end's step is XLA-compiled; the plain
        # loop is also what PyTorch computes here.
        return layer(self.units, return_sequences=self.return_sequences, use_cudnn=False)

    def onnx_weights(self, w: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """W [1, gates*u, in], R [1, gates*u, u], B [1, 2*gates*u] in ONNX's gate order."""
        raise NotImplementedError

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        arrays = (np.ascontiguousarray(a, np.float32) for a in self.onnx_weights(w))
        weights = [g.const(a, name) for a, name in zip(arrays, "WRB", strict=True)]
        x = g.op("Transpose", [xs[0]], perm=[1, 0, 2])  # ONNX is time-major: (steps, N, in)
        y = g.op(self.onnx_op, [x, *weights], hidden_size=self.units, **self.onnx_attrs)
        # y: (steps, directions = 1, N, units)
        if self.return_sequences:
            steps = g.op("Squeeze", [y, g.const(np.array([1], np.int64), "axes")])
            return g.op("Transpose", [steps], perm=[1, 0, 2])
        last_step = np.array(types[0].shape[0] - 1, np.int64)
        last = g.op("Gather", [y, g.const(last_step, "last_step")], axis=0)  # (1, N, units)
        return g.op("Squeeze", [last, g.const(np.array([0], np.int64), "axes")])
