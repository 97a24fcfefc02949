"""conv2d: a 2-D convolution over (H, W, C) images."""

from __future__ import annotations

from typing import ClassVar, Literal

from app.schemas.graph.ops._conv import Conv


class Conv2D(Conv):
    """Keras' Conv2D, channels last: filters, kernel_size, stride, padding same/valid."""

    op: Literal["conv2d"] = "conv2d"
    dims: ClassVar[int] = 2
