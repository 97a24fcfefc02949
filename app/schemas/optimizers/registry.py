"""Every optimizer, found once in this package: adding one is adding a module here."""

from __future__ import annotations

from typing import Any

from app.schemas import optimizers as optimizers_package
from app.schemas.optimizers.base import Optimizer
from app.schemas.registry import discover, kind_union

DEFAULT = "adam"
OPTIMIZERS: dict[str, type[Optimizer]] = discover(
    optimizers_package, Optimizer, "name", skip=("base", "registry")
)
# The job spec's optimizer: one of them by `name`, adam when the name is left out.
OptimizerSpec: Any = kind_union(OPTIMIZERS, "optimizer", default=DEFAULT)
