"""resize: bilinear, sampled at pixel centres without antialiasing (the convention of torch's
interpolate with align_corners=False and ONNX Resize's half_pixel, so an exported model can
redo it), float32. One size scales the shorter side (see app.schemas.augment.Resize)."""

from __future__ import annotations

import numpy as np

from app.schemas.augment import Resize, image_shape
from worker.training.data.augment.base import Draws

OP = "resize"


def _taps(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output position: the two input positions around its centre and the weight
    of the second."""
    centre = (np.arange(size_out) + 0.5) * (size_in / size_out) - 0.5
    centre = np.clip(centre, 0, size_in - 1)
    low = np.floor(centre).astype(np.int64)
    high = np.minimum(low + 1, size_in - 1)
    return low, high, (centre - low).astype(np.float32)


def apply(x: np.ndarray, step: Resize, draws: Draws) -> np.ndarray:
    height, width, _ = step.output(image_shape(x.shape[1:]))
    x = x.astype(np.float32)
    if (height, width) == x.shape[1:3]:
        return x
    y0, y1, wy = _taps(x.shape[1], height)
    x0, x1, wx = _taps(x.shape[2], width)
    rows = x[:, y0] * (1 - wy)[:, None, None] + x[:, y1] * wy[:, None, None]
    return rows[:, :, x0] * (1 - wx)[:, None] + rows[:, :, x1] * wx[:, None]
