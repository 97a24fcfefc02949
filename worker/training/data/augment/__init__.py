"""Image augmentation in numpy, one module per op (see registry): what `dataset.augment`
describes, applied to a batch the same way whatever the framework, the batch or a resume; and
the deterministic steps as model.onnx's nodes (`augment_onnx`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.schemas.augment import Step, augmented_shape, image_shape
from app.schemas.graph.kits import OnnxKit
from worker.training.data.augment.base import Draws
from worker.training.data.augment.registry import EXPORTS, OPS


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


def augment_onnx(
    g: OnnxKit, x: str, steps: Sequence[Step], sample_shape: Sequence[int]
) -> tuple[str, tuple[int, ...]]:
    """The deterministic steps as nodes on `x`, float32 rows of `sample_shape` (a batch axis
    first): the output's name and its rows' shape, as augment_batch's (gray stays (H, W))."""
    if not steps:
        return x, tuple(sample_shape)
    shape = image_shape(sample_shape)
    gray = len(sample_shape) == 2
    if gray:
        x = g.op("Reshape", [x, g.const(np.array([-1, *shape], np.int64), "image_shape")])
    for step in steps:
        if step.op not in EXPORTS:
            raise ValueError(f"{step.op} draws random numbers: model.onnx does not repeat it")
        x = EXPORTS[step.op](g, x, step, shape)
        shape = step.output(shape)
    out = augmented_shape(steps, sample_shape)
    if gray:
        x = g.op("Reshape", [x, g.const(np.array([-1, *out], np.int64), "rows_shape")])
    return x, out


__all__ = ["augment_batch", "augment_onnx"]
