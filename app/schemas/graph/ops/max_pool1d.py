"""max_pool1d: 1-D max pooling over (steps, channels) sequences."""

from __future__ import annotations

from typing import ClassVar, Literal

from app.schemas.graph.ops._pool import Pool


class MaxPool1D(Pool):
    """1-D max pooling over (steps, channels) sequences; stride defaults to size, no padding."""

    op: Literal["max_pool1d"] = "max_pool1d"
    dims: ClassVar[int] = 1
    kind: ClassVar[str] = "max"
