"""flip_horizontal: each image mirrored left to right with probability p."""

from __future__ import annotations

import numpy as np

from app.schemas.augment import FlipHorizontal
from worker.training.data.augment.base import Draws

OP = "flip_horizontal"


def apply(x: np.ndarray, step: FlipHorizontal, draws: Draws) -> np.ndarray:
    flip = draws.uniform(0) < step.p
    out = x.copy()
    out[flip] = x[flip][:, :, ::-1]
    return out
