"""Sliding windows (convolutions and pools), shared by their ops: TensorFlow's rule for
output sizes and 'same' padding, which both back-ends and the exporter follow."""

from __future__ import annotations

from typing import Literal

Padding = Literal["same", "valid"]


def out_size(size: int, window: int, stride: int, padding: Padding) -> int:
    """Output length of one spatial axis (0 when the window does not fit)."""
    if padding == "same":
        return -(-size // stride)
    return max(0, (size - window) // stride + 1)


def same_pads(size: int, window: int, stride: int) -> tuple[int, int]:
    """(before, after) zero padding of 'same': the odd pixel goes after, as in TensorFlow."""
    total = max((out_size(size, window, stride, "same") - 1) * stride + window - size, 0)
    return total // 2, total - total // 2


def pads(
    spatial: tuple[int, ...], window: int, stride: int, padding: Padding
) -> list[tuple[int, int]]:
    """(before, after) per spatial axis."""
    if padding == "valid":
        return [(0, 0)] * len(spatial)
    return [same_pads(size, window, stride) for size in spatial]
