"""normalize: (x - mean[c]) / std[c] per channel, float32."""

from __future__ import annotations

import numpy as np

from app.schemas.augment import Normalize
from worker.training.data.augment.base import Draws

OP = "normalize"


def apply(x: np.ndarray, step: Normalize, draws: Draws) -> np.ndarray:
    mean = np.asarray(step.mean, dtype=np.float32)
    std = np.asarray(step.std, dtype=np.float32)
    return (x.astype(np.float32) - mean) / std
