"""conv1d: a 1-D convolution over (steps, channels) sequences."""

from __future__ import annotations

from typing import ClassVar, Literal

from app.schemas.graph.ops._conv import Conv


class Conv1D(Conv):
    """Keras' Conv1D, channels last: filters, kernel_size, stride, padding same/valid."""

    op: Literal["conv1d"] = "conv1d"
    dims: ClassVar[int] = 1
