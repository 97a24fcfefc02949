"""Initial weights, drawn once here for both back-ends from the job's seed.

Both frameworks start from the very same numbers (Keras' defaults: Glorot-uniform kernels, zero
biases, unit batch-norm scales, orthogonal recurrent kernels, small uniform embeddings), so a
spec means the same model in each and the parity between them is a matter of arithmetic, not
of luck. Each op names its variables' initializers (app.schemas.graph); they are drawn in the
graph's order from one generator, so adding an op never changes another's draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from app.schemas.graph import INITIALIZER_NAMES, InitializerName, Variable

Initializer = Callable[[tuple[int, ...], np.random.Generator], np.ndarray]


def glorot_uniform(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """keras.initializers.GlorotUniform: dense [in, out], conv [kh, kw, in, out]."""
    receptive = math.prod(shape[:-2]) if len(shape) > 2 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def orthogonal(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """keras.initializers.Orthogonal over [rows, columns] (a recurrent kernel [u, gates*u])."""
    rows, cols = math.prod(shape[:-1]), shape[-1]
    flat = rng.normal(0.0, 1.0, size=(max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    q = q if rows >= cols else q.T
    return q[:rows, :cols].reshape(shape).astype(np.float32)


def small_uniform(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """keras.initializers.RandomUniform(-0.05, 0.05): Embedding's default."""
    return rng.uniform(-0.05, 0.05, size=shape).astype(np.float32)


def _fill(value: float) -> Initializer:
    return lambda shape, rng: np.full(shape, value, dtype=np.float32)


def forget_bias(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """An LSTM's bias [4 * units] with Keras' unit_forget_bias: ones for the forget gate."""
    out = np.zeros(shape, np.float32)
    units = shape[-1] // 4
    out[..., units : 2 * units] = 1.0
    return out


INITIALIZERS: dict[InitializerName, Initializer] = {
    "glorot_uniform": glorot_uniform,
    "orthogonal": orthogonal,
    "small_uniform": small_uniform,
    "forget_bias": forget_bias,
    "zeros": _fill(0.0),
    "ones": _fill(1.0),
}


if set(INITIALIZERS) != set(INITIALIZER_NAMES):  # every name the ops may use, drawn here
    raise RuntimeError(f"initializers {sorted(INITIALIZERS)} are not {sorted(INITIALIZER_NAMES)}")


def initial_weights(variables: list[Variable], seed: int) -> list[np.ndarray]:
    """One array per variable, in order, from the job's seed."""
    rng = np.random.default_rng([seed, 4099])
    return [INITIALIZERS[v.init](v.shape, rng) for v in variables]
