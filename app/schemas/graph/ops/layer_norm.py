"""layer_norm: normalize each sample (each step of a sequence) over its last axis."""

from __future__ import annotations

from typing import Literal

import numpy as np

from app.schemas.graph.base import KerasKit, Op, TensorType, Variable
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit

EPSILON = 1e-3  # Keras' default, in both back-ends


class LayerNorm(Op):
    """Keras' LayerNormalization over the last axis, with a learned scale and offset."""

    op: Literal["layer_norm"] = "layer_norm"

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (1, 2, 3), "values")
        return x

    def variables(self, xs: list[TensorType]) -> list[Variable]:
        c = (xs[0].shape[-1],)
        return [Variable("gamma", c, "ones"), Variable("beta", c, "zeros")]

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        return 8 * out.size

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        x = xs[0]
        return t.F.layer_norm(x, (x.shape[-1],), w[0], w[1], eps=EPSILON)

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.LayerNormalization(epsilon=EPSILON)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        names = [g.const(w[0], "ln_gamma"), g.const(w[1], "ln_beta")]
        return g.op("LayerNormalization", [xs[0], *names], axis=-1, epsilon=EPSILON)
