"""center_crop: the middle `size` of each image; an odd extra row or column comes off the
bottom or the right."""

from __future__ import annotations

import numpy as np

from app.schemas.augment import CenterCrop, pair
from worker.training.data.augment.base import Draws

OP = "center_crop"


def apply(x: np.ndarray, step: CenterCrop, draws: Draws) -> np.ndarray:
    height, width = pair(step.size)
    top, left = (x.shape[1] - height) // 2, (x.shape[2] - width) // 2
    return np.ascontiguousarray(x[:, top : top + height, left : left + width])
