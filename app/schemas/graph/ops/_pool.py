"""What the pooling ops share: a `size` window moved by `stride` (default: size), valid."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit
from app.schemas.graph.ops._window import out_size


class Pool(Op):
    """Max or average over windows of `dims` spatial axes, channels last; no padding."""

    dims: ClassVar[int] = 2
    kind: ClassVar[str] = "max"  # or "avg"
    size: int = Field(2, ge=1, le=8, description="window side")
    stride: int | None = Field(None, ge=1, le=8, description="step (default: size)")

    @property
    def step(self) -> int:
        return self.stride or self.size

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        what = "(steps, channels)" if self.dims == 1 else "an image (H, W, C)"
        self.needs_rank(x, (self.dims + 1,), what)
        spatial = [out_size(s, self.size, self.step, "valid") for s in x.shape[:-1]]
        if min(spatial) < 1:
            raise self.fail(f"a {self.size}-wide window does not fit its input {x}")
        return TensorType((*spatial, x.shape[-1]))

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        return self.size**self.dims * out.size

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        pools = {(1, "max"): t.F.max_pool1d, (2, "max"): t.F.max_pool2d, (2, "avg"): t.F.avg_pool2d}
        fn = pools[(self.dims, self.kind)]
        return t.channels_last(fn(t.channels_first(xs[0]), self.size, self.step))

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        layers = {
            (1, "max"): k.layers.MaxPooling1D,
            (2, "max"): k.layers.MaxPooling2D,
            (2, "avg"): k.layers.AveragePooling2D,
        }
        return layers[(self.dims, self.kind)](self.size, strides=self.step, padding="valid")

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        x = g.channels_first(xs[0], self.dims + 2)
        op_type = {"max": "MaxPool", "avg": "AveragePool"}[self.kind]
        size, step = [self.size] * self.dims, [self.step] * self.dims
        return g.channels_last(g.op(op_type, [x], kernel_shape=size, strides=step), self.dims + 2)
