"""One small graph per op (and per notable variant): what test_ops builds in both frameworks
and in ONNX. Every registered op must appear here (test_ops checks), so a new op comes with
its case."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Case:
    """A graph over samples of `shape` (token ids below `vocab` when it is set)."""

    shape: tuple[int, ...]
    layers: list[dict[str, Any]]
    vocab: int | None = None
    outputs: int = 3
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ops(self) -> set[str]:
        return {layer["op"] for layer in self.layers}


ENCODER = {"name": "enc", "op": "transformer_encoder", "heads": 2, "dim": 8, "ff_dim": 16}

CASES: dict[str, Case] = {
    "dense": Case((6,), [{"name": "d", "op": "dense", "units": 4}]),
    "dense_per_step": Case((5, 3), [{"name": "d", "op": "dense", "units": 4}]),
    "conv2d_same": Case((6, 6, 2), [{"name": "c", "op": "conv2d", "filters": 3}]),
    "conv2d_stride2_same_even_kernel": Case(
        (7, 6, 2),
        [{"name": "c", "op": "conv2d", "filters": 3, "kernel_size": 4, "stride": 2}],
    ),
    "conv2d_valid": Case(
        (6, 6, 2), [{"name": "c", "op": "conv2d", "filters": 3, "padding": "valid"}]
    ),
    "conv1d": Case(
        (9, 3), [{"name": "c", "op": "conv1d", "filters": 4, "kernel_size": 3, "stride": 2}]
    ),
    "max_pool2d": Case((7, 6, 2), [{"name": "p", "op": "max_pool2d", "size": 2}]),
    "avg_pool2d": Case((7, 7, 2), [{"name": "p", "op": "avg_pool2d", "size": 3, "stride": 2}]),
    "max_pool1d": Case((9, 3), [{"name": "p", "op": "max_pool1d", "size": 3}]),
    "global_avg_pool_image": Case((4, 5, 3), [{"name": "g", "op": "global_avg_pool"}]),
    "global_avg_pool_sequence": Case((5, 3), [{"name": "g", "op": "global_avg_pool"}]),
    "flatten": Case((3, 4, 2), [{"name": "f", "op": "flatten"}]),
    "reshape": Case((4, 6), [{"name": "r", "op": "reshape", "shape": [4, 3, 2]}]),
    "batch_norm": Case((5, 3), [{"name": "bn", "op": "batch_norm"}], tags=("train",)),
    "batch_norm_image": Case((4, 4, 3), [{"name": "bn", "op": "batch_norm"}], tags=("train",)),
    "batch_norm_momentum": Case(
        (4, 4, 3), [{"name": "bn", "op": "batch_norm", "momentum": 0.5}], tags=("train",)
    ),
    "layer_norm": Case((5, 4), [{"name": "ln", "op": "layer_norm"}], tags=("train",)),
    "dropout": Case((6,), [{"name": "drop", "op": "dropout", "rate": 0.5}]),
    **{
        f"activation_{fn}": Case((6,), [{"name": "a", "op": "activation", "fn": fn}])
        for fn in ("relu", "gelu", "tanh", "sigmoid", "silu")
    },
    "add": Case(
        (6,),
        [
            {"name": "d", "op": "dense", "units": 6},
            {"name": "sum", "op": "add", "inputs": ["input", "d"]},
        ],
    ),
    "concat": Case(
        (2, 6),
        [
            {"name": "a", "op": "dense", "units": 3, "inputs": ["input"]},
            {"name": "b", "op": "dense", "units": 2, "inputs": ["input"]},
            {"name": "cat", "op": "concat", "inputs": ["a", "b"]},
        ],
    ),
    "embedding": Case(
        (5,), [{"name": "emb", "op": "embedding", "vocab_size": 11, "dim": 4}], vocab=11
    ),
    **{
        f"{op}_{'sequences' if sequences else 'last'}": Case(
            (5, 3), [{"name": "r", "op": op, "units": 4, "return_sequences": sequences}]
        )
        for op in ("lstm", "gru")
        for sequences in (False, True)
    },
    "embedding_lstm": Case(
        (6,),
        [
            {"name": "emb", "op": "embedding", "vocab_size": 9, "dim": 3},
            {"name": "rnn", "op": "lstm", "units": 5},
        ],
        vocab=7,
    ),
    "embedding_gru_sequences": Case(
        (6,),
        [
            {"name": "emb", "op": "embedding", "vocab_size": 9, "dim": 3},
            {"name": "rnn", "op": "gru", "units": 4, "return_sequences": True},
            {"name": "pool", "op": "global_avg_pool"},
        ],
        vocab=9,
    ),
    "transformer_encoder": Case((6, 8), [ENCODER]),
    "transformer_encoder_projected": Case(
        (6, 5), [{"name": "proj", "op": "dense", "units": 8}, ENCODER]
    ),
    "transformer_encoder_image_rows": Case(
        (4, 4, 1),
        [
            {"name": "rows", "op": "reshape", "shape": [4, 4]},
            {"name": "proj", "op": "dense", "units": 8},
            ENCODER,
        ],
    ),
    "transformer_encoder_stacked": Case(
        (5, 8),
        [
            {**ENCODER, "name": "enc1", "heads": 4, "ff_dim": 5},
            {**ENCODER, "name": "enc2", "heads": 1, "positions": False},
        ],
    ),
}
