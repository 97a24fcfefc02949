"""transformer_encoder: one post-norm encoder block (self-attention, then a feed-forward)
over a sequence, with learned positions."""

from __future__ import annotations

import math
from typing import Generic, Literal, NamedTuple, TypeVar

import numpy as np
from pydantic import Field, model_validator

from app.schemas.graph.base import KerasKit, Op, TensorType, Variable, bias, kernel
from app.schemas.graph.kits import K, OnnxKit, T, TorchKit
from app.schemas.graph.ops.layer_norm import EPSILON

V = TypeVar("V")


class Block(NamedTuple, Generic[V]):
    """The block's variables in order (after `positions`, when it has them), each a V: a
    back-end's tensor or an array."""

    query_kernel: V
    query_bias: V
    key_kernel: V
    key_bias: V
    value_kernel: V
    value_bias: V
    output_kernel: V
    output_bias: V
    ln1_gamma: V
    ln1_beta: V
    ff1_kernel: V
    ff1_bias: V
    ff2_kernel: V
    ff2_bias: V
    ln2_gamma: V
    ln2_beta: V


class TransformerEncoder(Op):
    """x += positions; x = LN1(x + MHA(x, x)); x = LN2(x + W2 relu(W1 x + b1) + b2).

    Attention is scaled dot-product over `heads` heads of dim/heads values, softmax over the
    keys, no mask and no dropout (a dropout node can follow). Variables, Keras layout:
    positions [steps, dim] (small_uniform, no L2); query/key/value/output kernels [dim, dim]
    and biases [dim]; ln1 gamma/beta [dim]; ff1 kernel [dim, ff_dim], bias [ff_dim]; ff2
    kernel [ff_dim, dim], bias [dim]; ln2 gamma/beta [dim]. Kernels are Glorot-uniform and
    decay; biases and betas start at zero, gammas at one.
    """

    op: Literal["transformer_encoder"] = "transformer_encoder"
    heads: int = Field(ge=1, le=64, description="attention heads; dim must divide by it")
    dim: int = Field(ge=8, le=4096, description="model width: the input's and output's features")
    ff_dim: int = Field(ge=1, le=16384, description="feed-forward (hidden) width")
    positions: bool = Field(
        True,
        description="learn a vector per step and add it to the input first (false for an "
        "encoder stacked on another)",
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> TransformerEncoder:
        if self.dim % self.heads:
            raise self.fail(f"dim {self.dim} does not divide into {self.heads} heads")
        return self

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        self.needs_rank(x, (2,), "a sequence (steps, features), e.g. an image's rows by a reshape")
        steps, features = x.shape
        if features != self.dim:
            raise self.fail(
                f"its input {x} has {features} features, not dim {self.dim}; "
                f"add a dense of {self.dim} units before it"
            )
        return TensorType((steps, self.dim))

    def variables(self, xs: list[TensorType]) -> list[Variable]:
        d, f = self.dim, self.ff_dim
        steps = xs[0].shape[0]
        out = [Variable("positions", (steps, d), "small_uniform")] if self.positions else []
        for name in Block._fields:
            part, role = name.split("_")  # e.g. ("ff1", "kernel")
            width = f if part == "ff1" else d  # what the part puts out
            if role == "kernel":
                out.append(kernel(name, (f if part == "ff2" else d, width)))
            elif role == "gamma":
                out.append(Variable(name, (d,), "ones"))
            else:  # a bias or a norm's beta
                out.append(bias(name, (width,)))
        return out

    def flops(self, xs: list[TensorType], out: TensorType) -> int:
        s, d, f = xs[0].shape[0], self.dim, self.ff_dim
        projections = 4 * 2 * s * d * d  # query, key, value, output
        attention = 2 * 2 * s * s * d  # QK^T and AV, all heads together
        scores = 4 * self.heads * s * s  # scale and softmax
        feed_forward = 2 * 2 * s * d * f + s * f  # two matmuls and the relu
        small = (1 if self.positions else 0) * s * d + 2 * s * d + 2 * 8 * s * d  # adds, norms
        return projections + attention + scores + feed_forward + small

    def kept(self, xs: list[TensorType], out: TensorType, framework: str) -> int:
        """The feed-forward's hidden values (about 1.5 of steps × ff_dim: relu's output and
        its input's), the projections, norms and residuals (about 3.5 of steps × dim), as a
        PyTorch step's peak measures them; TensorFlow also keeps the attention scores
        (heads × steps × steps), which PyTorch's fused attention never holds whole."""
        s, d, f = xs[0].shape[0], self.dim, self.ff_dim
        scores = self.heads * s * s if framework == "tensorflow" else 0
        return int(1.5 * s * f + 3.5 * s * d) + scores

    def _split(self, w: list[V]) -> tuple[V | None, Block[V]]:
        """(positions or None, the block's variables)."""
        if self.positions:
            return w[0], Block(*w[1:])
        return None, Block(*w)

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        positions, b = self._split(w)
        F, x = t.F, xs[0]
        if positions is not None:
            x = x + positions
        steps = x.shape[1]

        def heads(kern: T, offset: T) -> T:  # (N, S, D) -> (N, heads, S, head_dim)
            y = F.linear(x, kern.t(), offset)
            return y.reshape(-1, steps, self.heads, self.head_dim).transpose(1, 2)

        q = heads(b.query_kernel, b.query_bias)
        k = heads(b.key_kernel, b.key_bias)
        v = heads(b.value_kernel, b.value_bias)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(-1, steps, self.dim)
        a = F.linear(a, b.output_kernel.t(), b.output_bias)
        x = F.layer_norm(x + a, (self.dim,), b.ln1_gamma, b.ln1_beta, eps=EPSILON)
        h = F.relu(F.linear(x, b.ff1_kernel.t(), b.ff1_bias))
        h = F.linear(h, b.ff2_kernel.t(), b.ff2_bias)
        return F.layer_norm(x + h, (self.dim,), b.ln2_gamma, b.ln2_beta, eps=EPSILON)

    def keras_forward(self, k: KerasKit[K], w: list[K], xs: list[K], training: bool) -> K:
        positions, b = self._split(w)
        o, x = k.ops, xs[0]
        if positions is not None:
            x = x + positions
        steps = x.shape[1]

        def heads(kern: K, offset: K, perm: tuple[int, ...]) -> K:
            y = o.reshape(o.matmul(x, kern) + offset, (-1, steps, self.heads, self.head_dim))
            return o.transpose(y, perm)

        q = heads(b.query_kernel, b.query_bias, (0, 2, 1, 3))
        keys_t = heads(b.key_kernel, b.key_bias, (0, 2, 3, 1))  # (N, heads, head_dim, S)
        v = heads(b.value_kernel, b.value_bias, (0, 2, 1, 3))
        scores = o.softmax(o.matmul(q, keys_t) * (1.0 / math.sqrt(self.head_dim)), axis=-1)
        a = o.reshape(o.transpose(o.matmul(scores, v), (0, 2, 1, 3)), (-1, steps, self.dim))
        a = o.matmul(a, b.output_kernel) + b.output_bias
        x = o.layer_normalization(x + a, b.ln1_gamma, b.ln1_beta, epsilon=EPSILON)
        h = o.relu(o.matmul(x, b.ff1_kernel) + b.ff1_bias)
        h = o.matmul(h, b.ff2_kernel) + b.ff2_bias
        return o.layer_normalization(x + h, b.ln2_gamma, b.ln2_beta, epsilon=EPSILON)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        positions, b = self._split(w)
        steps, x = types[0].shape[0], xs[0]
        if positions is not None:
            x = g.op("Add", [x, g.const(positions, "positions")])
        split = g.const(np.array([-1, steps, self.heads, self.head_dim], np.int64), "heads")

        def heads(kern: np.ndarray, offset: np.ndarray, perm: list[int]) -> str:
            y = g.op("Reshape", [_dense(g, x, kern, offset), split])
            return g.op("Transpose", [y], perm=perm)

        q = heads(b.query_kernel, b.query_bias, [0, 2, 1, 3])
        keys_t = heads(b.key_kernel, b.key_bias, [0, 2, 3, 1])
        v = heads(b.value_kernel, b.value_bias, [0, 2, 1, 3])
        scale = g.const(np.asarray(1.0 / math.sqrt(self.head_dim), np.float32), "scale")
        scores = g.op("Softmax", [g.op("Mul", [g.op("MatMul", [q, keys_t]), scale])], axis=-1)
        a = g.op("Transpose", [g.op("MatMul", [scores, v])], perm=[0, 2, 1, 3])
        a = g.op("Reshape", [a, g.const(np.array([-1, steps, self.dim], np.int64), "shape")])
        a = _dense(g, a, b.output_kernel, b.output_bias)
        x = _norm(g, g.op("Add", [x, a]), b.ln1_gamma, b.ln1_beta)
        h = g.op("Relu", [_dense(g, x, b.ff1_kernel, b.ff1_bias)])
        h = _dense(g, h, b.ff2_kernel, b.ff2_bias)
        return _norm(g, g.op("Add", [x, h]), b.ln2_gamma, b.ln2_beta)


def _dense(g: OnnxKit, x: str, kern: np.ndarray, offset: np.ndarray) -> str:
    """x @ kernel + bias over the last axis, in ONNX."""
    return g.op("Add", [g.op("MatMul", [x, g.const(kern, "kernel")]), g.const(offset, "bias")])


def _norm(g: OnnxKit, x: str, gamma: np.ndarray, beta: np.ndarray) -> str:
    names = [g.const(gamma, "ln_gamma"), g.const(beta, "ln_beta")]
    return g.op("LayerNormalization", [x, *names], axis=-1, epsilon=EPSILON)
