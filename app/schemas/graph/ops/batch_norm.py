"""batch_norm: normalize each channel by batch statistics while training, moving ones after."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType, Variable
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit

EPSILON = 1e-3  # Keras' default, in both back-ends
# Keras' terms: the moving statistics keep this share of their old value at each step
# (PyTorch's BatchNorm momentum is 1 minus it). The initial statistics still weigh MOMENTUM**n
# after n steps: 0.9 forgets them within a few dozen steps (0.9**50 < 0.01) and averages over
# about ten batches, so a job of a few hundred steps evaluates on statistics of its trained
# weights. Keras' own 0.99 still holds 0.99**168 = 18 % of the initial ones after 168 steps,
# and averages over weights that changed a lot since: such a short job evaluates at chance.
MOMENTUM = 0.9


def momentum_field(prefix: str = "") -> Any:
    """The bounded momentum field, for the op and for the templates that add the op."""
    return Field(
        MOMENTUM,
        ge=0.0,
        lt=1.0,
        description=f"{prefix}the share of the moving mean and variance kept at each training "
        "step (Keras' momentum; PyTorch's is 1 minus it). 0.9, PyTorch's default, settles "
        "within a few dozen steps; Keras' 0.99 needs several hundred before the model "
        "evaluates well. Jobs stored before this field existed keep the 0.99 they had",
    )


class BatchNorm(Op):
    """Keras' BatchNormalization over the last (channel) axis.

    The moving variance follows Keras: the batch's biased variance (PyTorch's own BatchNorm
    would use the unbiased one), so the two back-ends infer from the same statistics.
    """

    op: Literal["batch_norm"] = "batch_norm"
    momentum: float = momentum_field()

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

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        # PyTorch's fused kernel over (N, C, ...): the channels-first view of a channels-last
        # image is channels_last memory, which the kernel reads as it is.
        gamma, beta, mean, var = w
        x = t.channels_first(xs[0]) if xs[0].ndim > 2 else xs[0]
        if training:
            # Without running statistics the kernel normalizes by the batch's and hands them
            # back; they update the moving ones here, since PyTorch would move the variance
            # towards the unbiased batch variance where Keras (and so model.onnx's parity with
            # TensorFlow) moves it towards the biased one.
            y, batch_mean, invstd = t.torch.native_batch_norm(
                x, gamma, beta, None, None, True, 0.0, EPSILON
            )
            with t.torch.no_grad():
                batch_var = invstd.double().pow(-2).sub(EPSILON)
                mean.lerp_(batch_mean.type_as(mean), 1 - self.momentum)
                var.lerp_(batch_var.type_as(var), 1 - self.momentum)
        else:
            y = t.F.batch_norm(x, mean, var, gamma, beta, False, 0.0, EPSILON)
        return t.channels_last(y) if xs[0].ndim > 2 else y

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.BatchNormalization(momentum=self.momentum, epsilon=EPSILON)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        # Inference only: the moving statistics are the trained ones handed in as w, so the
        # momentum that made them plays no part here.
        gamma, beta, mean, var = (np.asarray(a, np.float64) for a in w)
        with np.errstate(invalid="ignore"):  # a negative variance is NaN, as in the back-ends
            scale = gamma / np.sqrt(var + EPSILON)
        shift = beta - mean * scale
        x = g.op("Mul", [xs[0], g.const(scale.astype(np.float32), "bn_scale")])
        return g.op("Add", [x, g.const(shift.astype(np.float32), "bn_shift")])
