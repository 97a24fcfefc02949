"""resize: bilinear, sampled at pixel centres without antialiasing (the convention of torch's
interpolate with align_corners=False and ONNX Resize's half_pixel, so an exported model can
redo it: the opset model.onnx uses predates Resize's antialias), float32. One size scales the
shorter side (see app.schemas.augment.Resize)."""

from __future__ import annotations

import numpy as np

from app.schemas.augment import Resize, Shape, image_shape
from app.schemas.graph.kits import OnnxKit
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


def onnx(g: OnnxKit, x: str, step: Resize, shape: Shape) -> str:
    """ONNX Resize (linear, half_pixel) to the step's size, channels first around it: its
    `sizes` are the batch's own length and the fixed rest, so any batch size goes through."""
    height, width, channels = step.output(shape)
    if (height, width) == shape[:2]:
        return x
    first = g.channels_first(x, 4)
    batch = g.op(
        "Slice",
        [
            g.op("Shape", [first]),
            g.const(np.array([0], np.int64), "batch_start"),
            g.const(np.array([1], np.int64), "batch_end"),
        ],
    )
    rest = g.const(np.array([channels, height, width], np.int64), "resize_to")
    sizes = g.op("Concat", [batch, rest], axis=0)
    resized = g.op(
        "Resize",
        [first, "", "", sizes],
        mode="linear",
        coordinate_transformation_mode="half_pixel",
    )
    return g.channels_last(resized, 4)
