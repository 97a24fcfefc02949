"""What conv1d and conv2d share: bounded fields, shapes, variables, the three builds."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType, Variable, bias, kernel
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit
from app.schemas.graph.ops._window import Padding, out_size, pads


class Conv(Op):
    """A convolution over channels-last samples with `dims` spatial axes."""

    dims: ClassVar[int] = 2
    xla_on_cpu: ClassVar[bool] = False  # XLA's CPU convolution gradients: generic loops
    filters: int = Field(ge=1, le=1024, description="output channels")
    kernel_size: int = Field(3, ge=1, le=11, description="square (or length) of the window")
    stride: int = Field(1, ge=1, le=4, description="step of the window")
    padding: Padding = Field("same", description="same: zero-pad to ceil(size/stride); valid")

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        what = "(steps, channels)" if self.dims == 1 else "an image (H, W, C)"
        self.needs_rank(x, (self.dims + 1,), what)
        spatial = [out_size(s, self.kernel_size, self.stride, self.padding) for s in x.shape[:-1]]
        if min(spatial) < 1:
            raise self.fail(f"a {self.kernel_size}-wide valid window does not fit its input {x}")
        return TensorType((*spatial, self.filters))

    def variables(self, xs: list[TensorType]) -> list[Variable]:
        window = (self.kernel_size,) * self.dims
        return [
            kernel("kernel", (*window, xs[0].shape[-1], self.filters)),
            bias("bias", (self.filters,)),
        ]

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        per_output = self.kernel_size**self.dims * xs[0].shape[-1]
        return 2 * per_output * out.size

    def _pads(self, x: TensorType) -> list[tuple[int, int]]:
        return pads(x.shape[:-1], self.kernel_size, self.stride, self.padding)

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        x = t.channels_first(xs[0])
        spatial = tuple(x.shape[2:])
        per_axis = pads(spatial, self.kernel_size, self.stride, self.padding)
        weight = t.conv_kernel(w[0])  # Keras [k.., in, out] -> PyTorch [out, in, k..]
        conv = t.F.conv1d if self.dims == 1 else t.F.conv2d
        if all(before == after for before, after in per_axis):
            y = conv(x, weight, w[1], self.stride, [before for before, _ in per_axis])
        else:  # asymmetric 'same': pad explicitly (F.pad takes the last axis first)
            flat = [p for pair in reversed(per_axis) for p in pair]
            y = conv(t.F.pad(x, flat), weight, w[1], self.stride)
        return t.channels_last(y)

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        layer = k.layers.Conv1D if self.dims == 1 else k.layers.Conv2D
        return layer(self.filters, self.kernel_size, strides=self.stride, padding=self.padding)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        order = (2, 1, 0) if self.dims == 1 else (3, 2, 0, 1)  # -> [out, in, k..]
        weight = np.ascontiguousarray(np.transpose(w[0], order))
        per_axis = self._pads(types[0])
        onnx_pads = [b for b, _ in per_axis] + [a for _, a in per_axis]
        x = g.channels_first(xs[0], self.dims + 2)
        y = g.op(
            "Conv",
            [x, g.const(weight, "conv"), g.const(w[1], "bias")],
            kernel_shape=[self.kernel_size] * self.dims,
            pads=onnx_pads,
            strides=[self.stride] * self.dims,
        )
        return g.channels_last(y, self.dims + 2)
