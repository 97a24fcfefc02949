"""normalize: (x - mean[c]) / std[c] per channel, float32; in model.onnx the same Sub and Div."""

from __future__ import annotations

import numpy as np

from app.schemas.augment import Normalize, Shape
from app.schemas.graph.kits import OnnxKit
from worker.training.data.augment.base import Draws

OP = "normalize"


def apply(x: np.ndarray, step: Normalize, draws: Draws) -> np.ndarray:
    mean = np.asarray(step.mean, dtype=np.float32)
    std = np.asarray(step.std, dtype=np.float32)
    return (x.astype(np.float32) - mean) / std


def onnx(g: OnnxKit, x: str, step: Normalize, shape: Shape) -> str:
    mean = g.const(np.asarray(step.mean, dtype=np.float32), "mean")
    return g.op("Div", [g.op("Sub", [x, mean]), g.const(np.asarray(step.std, np.float32), "std")])
