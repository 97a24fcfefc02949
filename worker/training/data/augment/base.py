"""What every augmentation op is given: a batch of images (N, H, W, C), its step, and the
random numbers it may draw. A draw is a pure function of (seed, epoch, sample id, step, draw
number), counter-based (SplitMix64), so a sample's pixels never depend on which batch, rank,
resume or framework it comes through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.schemas.augment import Shape, Step
from app.schemas.graph.kits import OnnxKit

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
DRAWS_PER_STEP = 16  # the draws one step may make for each sample
Apply = Callable[[np.ndarray, Any, "Draws"], np.ndarray]
# (kit, channels-last float tensor, step, its images' (H, W, C)) -> the step's output tensor
Emit = Callable[[OnnxKit, str, Any, Shape], str]


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64s (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * M1
    z = (z ^ (z >> np.uint64(27))) * M2
    return z ^ (z >> np.uint64(31))


@dataclass(frozen=True)
class Draws:
    """The random numbers of one step for each sample of a batch."""

    seed: int
    epoch: int
    ids: np.ndarray  # each sample's global id
    step: int  # the step's place in dataset.augment

    def uniform(self, draw: int) -> np.ndarray:
        """Float64 in [0, 1), one per sample: draw number `draw` (< DRAWS_PER_STEP)."""
        if not 0 <= draw < DRAWS_PER_STEP:
            raise ValueError(f"draw {draw} is not 0 .. {DRAWS_PER_STEP - 1}")
        z = np.full(len(self.ids), np.uint64(self.seed % 2**64), dtype=np.uint64)
        for part in (self.epoch, self.step * DRAWS_PER_STEP + draw):
            z = _mix(z + GOLDEN) ^ np.uint64(part % 2**64)
        z = _mix(_mix(z + GOLDEN) ^ self.ids.astype(np.uint64))
        return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def integers(self, draw: int, high: np.ndarray | int) -> np.ndarray:
        """Int64 in [0, high), one per sample (high >= 1)."""
        return np.minimum(
            (self.uniform(draw) * high).astype(np.int64), np.asarray(high, dtype=np.int64) - 1
        )


def crop(x: np.ndarray, top: np.ndarray, left: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Each image's window of `size` at its own (top, left)."""
    rows = top[:, None] + np.arange(size[0])
    cols = left[:, None] + np.arange(size[1])
    n = np.arange(len(x))[:, None, None]
    return x[n, rows[:, :, None], cols[:, None, :]]


__all__ = ["Apply", "Draws", "Emit", "Step", "crop"]
