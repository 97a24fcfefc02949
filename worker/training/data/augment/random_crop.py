"""random_crop: pad each image with `padding` zeros a side, then take `size` at a random place
(each position equally likely)."""

from __future__ import annotations

import numpy as np

from app.schemas.augment import RandomCrop, pair
from worker.training.data.augment.base import Draws, crop

OP = "random_crop"


def apply(x: np.ndarray, step: RandomCrop, draws: Draws) -> np.ndarray:
    p = step.padding
    if p:
        x = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    size = pair(step.size)
    top = draws.integers(0, x.shape[1] - size[0] + 1)
    left = draws.integers(1, x.shape[2] - size[1] + 1)
    return crop(x, top, left, size)
