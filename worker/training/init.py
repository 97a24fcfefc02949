"""Initial weights, drawn once here for both back-ends from the job's seed.

Both frameworks start from the very same numbers (Keras' defaults: Glorot-uniform kernels, zero
biases, unit batch-norm scales), so a spec means the same model in each and the parity between
them is a matter of arithmetic, not of luck. Variables are described in Keras layout and order.
"""

from __future__ import annotations

import math

import numpy as np

# role -> constant fill; kernels are drawn instead
CONSTANTS = {"bias": 0.0, "beta": 0.0, "moving_mean": 0.0, "gamma": 1.0, "moving_variance": 1.0}


def glorot_uniform(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """keras.initializers.GlorotUniform: dense [in, out], conv [kh, kw, in, out]."""
    receptive = math.prod(shape[:-2]) if len(shape) > 2 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def initial_weights(variables: list[tuple[str, tuple[int, ...]]], seed: int) -> list[np.ndarray]:
    """One array per (role, shape), roles: kernel, bias, gamma, beta, moving_mean/variance."""
    rng = np.random.default_rng([seed, 4099])
    out = []
    for role, shape in variables:
        if role == "kernel":
            out.append(glorot_uniform(shape, rng))
        else:
            out.append(np.full(shape, CONSTANTS[role], dtype=np.float32))
    return out
