"""embedding: token ids -> learned vectors, one per step (Keras' Embedding)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from app.schemas.graph.base import KerasKit, Op, TensorType, Variable
from app.schemas.graph.kits import K, KerasLayer, OnnxKit, T, TorchKit

MAX_VOCAB = 1_000_000
ONNX_INT64 = 7  # onnx.TensorProto.INT64: op modules import no framework, onnx included


class Embedding(Op):
    """Token ids (steps,) -> (steps, dim), a learned vector per id (Keras' Embedding); reads
    data uploaded with kind tokens, whose vocab must not exceed vocab_size."""

    op: Literal["embedding"] = "embedding"
    vocab_size: int = Field(ge=2, le=MAX_VOCAB, description="token ids run 0 … vocab_size - 1")
    dim: int = Field(ge=1, le=4096, description="width of each token's vector")

    def infer(self, xs: list[TensorType]) -> TensorType:
        (x,) = xs
        if not x.tokens:
            raise self.fail(
                f"takes token ids; its input {x} holds real values (upload integer x with "
                "kind tokens)"
            )
        if len(x.shape) != 1:
            raise self.fail(f"needs a sequence of token ids (steps,); its input is {x}")
        if x.vocab is not None and x.vocab > self.vocab_size:
            raise self.fail(
                f"its input {x} holds ids up to {x.vocab - 1}; vocab_size {self.vocab_size} "
                f"must be at least {x.vocab}"
            )
        return TensorType((x.shape[0], self.dim))

    def variables(self, xs: list[TensorType]) -> list[Variable]:
        return [Variable("embeddings", (self.vocab_size, self.dim), "small_uniform")]

    def torch_forward(self, t: TorchKit[T], w: list[T], xs: list[T], training: bool) -> T:
        return t.F.embedding(xs[0].long(), w[0])

    def keras_layer(self, k: KerasKit[K], xs: list[TensorType]) -> KerasLayer:
        return k.layers.Embedding(self.vocab_size, self.dim)

    def onnx(self, g: OnnxKit, xs: list[str], w: list[np.ndarray], types: list[TensorType]) -> str:
        # model.onnx takes float32 rows whatever the data: the ids are whole numbers there
        ids = g.op("Cast", [xs[0]], to=ONNX_INT64)
        return g.op("Gather", [g.const(w[0], "embeddings"), ids], axis=0)
