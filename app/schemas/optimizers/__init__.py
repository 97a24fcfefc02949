"""The optimizers: one module each (spec fields, state slots, PyTorch and Keras update rules),
found by registry.py; base.py is what they all are."""

from app.schemas.optimizers.base import Optimizer
from app.schemas.optimizers.registry import DEFAULT, OPTIMIZERS, OptimizerSpec

__all__ = ["DEFAULT", "OPTIMIZERS", "Optimizer", "OptimizerSpec"]
