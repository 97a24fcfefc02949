"""What the data modules hand each other: the loaded arrays, the splits, the error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from worker.training.data.streamed import StreamedData


class DataError(Exception):
    """The data set cannot be used; the message says why and what to do."""


@dataclass
class Splits:
    """Arrays ready for a back-end: x float32 (int32 token ids when vocab is set); y int64
    classes or float32 targets."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray | None
    y_val: np.ndarray | None
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    outputs: int  # classes, or 1 for regression
    # The normalization applied: normalized = (raw - shift) / scale, float32 (model.onnx redoes it)
    scale: np.ndarray = field(default_factory=lambda: np.asarray(np.float32(1.0)))
    shift: np.ndarray = field(default_factory=lambda: np.asarray(np.float32(0.0)))
    fingerprint: str = ""  # sha256 of the raw arrays used (see data_fingerprint)
    vocab: int | None = None  # token data: max id + 1 over the whole upload
    # A sharded data set: the back-end streams training batches and scores the held-out
    # splits from it; x_train is then a small prepared sample, x_val and x_test None.
    stream: StreamedData | None = None

    @property
    def has_val(self) -> bool:
        return self.x_val is not None or (self.stream is not None and "val" in self.stream.parts)

    @property
    def has_test(self) -> bool:
        return self.x_test is not None or (
            self.stream is not None and "test" in self.stream.parts
        )

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def tokens(self) -> bool:
        """x holds token ids (never normalized): the graph's input is of token type."""
        return self.vocab is not None


@dataclass
class RawData:
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    unit_scale: float | None  # what "unit" divides by (255 for 8-bit images, 16 for digits)
    classes: int | None = None  # known from the data set (uploads); else from the labels
    vocab: int | None = None  # token data (uploads of kind tokens): max id + 1
