"""max_pool2d: 2-D max pooling over (H, W, C) images."""

from __future__ import annotations

from typing import ClassVar, Literal

from app.schemas.graph.ops._pool import Pool


class MaxPool2D(Pool):
    """2-D max pooling over (H, W, C) images; stride defaults to size, no padding."""

    op: Literal["max_pool2d"] = "max_pool2d"
    dims: ClassVar[int] = 2
    kind: ClassVar[str] = "max"
