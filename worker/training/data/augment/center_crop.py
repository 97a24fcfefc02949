"""center_crop: the middle `size` of each image; an odd extra row or column comes off the
bottom or the right. In model.onnx: a Slice of the same rows and columns."""

from __future__ import annotations

import numpy as np

from app.schemas.augment import CenterCrop, Shape, pair
from app.schemas.graph.kits import OnnxKit
from worker.training.data.augment.base import Draws

OP = "center_crop"


def _corner(shape: tuple[int, ...], height: int, width: int) -> tuple[int, int]:
    return (shape[0] - height) // 2, (shape[1] - width) // 2


def apply(x: np.ndarray, step: CenterCrop, draws: Draws) -> np.ndarray:
    height, width = pair(step.size)
    top, left = _corner(x.shape[1:], height, width)
    return np.ascontiguousarray(x[:, top : top + height, left : left + width])


def onnx(g: OnnxKit, x: str, step: CenterCrop, shape: Shape) -> str:
    height, width = pair(step.size)
    top, left = _corner(shape, height, width)
    starts = g.const(np.array([top, left], np.int64), "crop_starts")
    ends = g.const(np.array([top + height, left + width], np.int64), "crop_ends")
    return g.op("Slice", [x, starts, ends, g.const(np.array([1, 2], np.int64), "crop_axes")])
