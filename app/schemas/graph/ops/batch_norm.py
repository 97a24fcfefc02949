"""batch_norm: normalize each channel by batch statistics while training, moving ones after."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from app.schemas.graph.base import Op, TensorType, Variable

EPSILON, MOMENTUM = 1e-3, 0.99  # Keras' defaults, in both back-ends


class BatchNorm(Op):
    """Keras' BatchNormalization over the last (channel) axis.

    The moving variance follows Keras: the batch's biased variance (PyTorch's own BatchNorm
    would use the unbiased one), so the two back-ends infer from the same statistics.
    """

    op: Literal["batch_norm"] = "batch_norm"

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (1, 2, 3), "values")
        return x

    def variables(self, xs: list[TensorType]) -> list[Variable]:
        c = (xs[0].shape[-1],)
        return [
            Variable("gamma", c, "ones"),
            Variable("beta", c, "zeros"),
            Variable("moving_mean", c, "zeros", trainable=False),
            Variable("moving_variance", c, "ones", trainable=False),
        ]

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        return 2 * out.size

    def torch_forward(self, t: Any, w: list[Any], xs: list[Any], training: bool) -> Any:
        gamma, beta, mean, var = w
        x = xs[0]
        if training:
            axes = tuple(range(x.ndim - 1))
            batch_var, batch_mean = t.torch.var_mean(x.float(), dim=axes, correction=0)
            with t.torch.no_grad():
                mean.mul_(MOMENTUM).add_(batch_mean, alpha=1 - MOMENTUM)
                var.mul_(MOMENTUM).add_(batch_var, alpha=1 - MOMENTUM)
            scale = gamma * t.torch.rsqrt(batch_var + EPSILON)
            return (x - batch_mean) * scale + beta
        return (x - mean) * (gamma * t.torch.rsqrt(var + EPSILON)) + beta

    def keras_layer(self, k: Any, xs: list[TensorType]) -> Any:
        return k.layers.BatchNormalization(momentum=MOMENTUM, epsilon=EPSILON)

    def onnx(self, g: Any, xs: list[str], w: list[Any], types: list[TensorType]) -> str:
        gamma, beta, mean, var = (np.asarray(a, np.float64) for a in w)
        with np.errstate(invalid="ignore"):  # a negative variance is NaN, as in the back-ends
            scale = gamma / np.sqrt(var + EPSILON)
        shift = beta - mean * scale
        x = g.op("Mul", [xs[0], g.const(scale.astype(np.float32), "bn_scale")])
        return g.op("Add", [x, g.const(shift.astype(np.float32), "bn_shift")])
