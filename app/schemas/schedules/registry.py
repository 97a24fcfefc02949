"""Every learning-rate schedule, found once in this package: adding one is adding a module."""

from __future__ import annotations

from typing import Any

from app.schemas import schedules as schedules_package
from app.schemas.registry import discover, kind_union
from app.schemas.schedules.base import Schedule

SCHEDULES: dict[str, type[Schedule]] = discover(
    schedules_package, Schedule, "name", skip=("base", "registry")
)
# The job spec's lr_scheduler: one of them by `name` (which it must give).
LRSchedulerSpec: Any = kind_union(SCHEDULES, "lr_scheduler")
