"""Image augmentation in numpy, one module per op (see registry): what `dataset.augment`
describes, applied to a batch the same way whatever the framework, the batch or a resume."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.schemas.augment import Step, image_shape
from worker.training.data.augment.base import Draws
from worker.training.data.augment.registry import OPS


def augment_batch(
    x: np.ndarray, ids: np.ndarray, epoch: int, seed: int, steps: Sequence[Step]
) -> np.ndarray:
    """The batch `x` (N, H, W) or (N, H, W, C) after the steps, in order; sample i's randomness
    is a function of (seed, epoch, ids[i]) only. Same dimensions out as in; dtype kept by the
    geometric steps, float32 after resize or normalize. `x` is never changed in place."""
    if not steps:
        return x
    if len(ids) != len(x):
        raise ValueError(f"{len(ids)} sample ids for a batch of {len(x)}")
    image_shape(x.shape[1:])  # ValueError if these are no images
    gray = x.ndim == 3
    images = x[..., None] if gray else x
    ids = np.asarray(ids)
    for at, step in enumerate(steps):
        images = OPS[step.op](images, step, Draws(seed, epoch, ids, at))
    return images[..., 0] if gray else images


__all__ = ["augment_batch"]
