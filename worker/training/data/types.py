"""What the data modules hand each other: the loaded arrays, the splits, the error."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from worker.training.data.stream import ShardStream


class DataError(Exception):
    """The data set cannot be used; the message says why and what to do."""


class StreamSource(Protocol):
    """A sharded data set as a back-end trains on it (worker.training.data.streamed)."""

    @property
    def parts(self) -> Mapping[str, Any]:
        """The splits it holds ("train", "val", "test"), each with its `rows`."""

    def train_stream(self, world: int, rank: int, replicas: int) -> ShardStream:
        """Rank `rank` of `world` streams' training batches, `replicas` replicas in all."""

    def chunks(self, split: str, rank: int, world: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Rank `rank`'s normalized chunks of a held-out split."""

    def head(self, split: str, rows: int) -> tuple[np.ndarray, np.ndarray]: ...
    def raw_head(self, split: str, rows: int) -> tuple[np.ndarray, np.ndarray]: ...
    def held_out(self, x: np.ndarray) -> np.ndarray: ...

    @property
    def raw_shape(self) -> tuple[int, ...]:
        """One sample's shape as stored, before dataset.augment."""

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """Each label's name, when the data set names its classes (an image folder's folders)."""

    def normalize(self, x: np.ndarray) -> np.ndarray: ...
    def prepare(self, x: np.ndarray, ids: np.ndarray, epoch: int) -> np.ndarray: ...
    def close(self) -> None: ...


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
    stream: StreamSource | None = None

    @property
    def has_val(self) -> bool:
        return self.x_val is not None or (self.stream is not None and "val" in self.stream.parts)

    @property
    def has_test(self) -> bool:
        return self.x_test is not None or (self.stream is not None and "test" in self.stream.parts)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One sample as the model reads it (after dataset.augment's steps)."""
        return tuple(self.x_train.shape[1:])

    @property
    def raw_shape(self) -> tuple[int, ...]:
        """One sample as stored: what model.onnx and /predict take."""
        return self.stream.raw_shape if self.stream is not None else self.input_shape

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
