"""The learning-rate schedules: one module each (spec fields and the per-epoch rule), found by
registry.py; base.py is what they all are."""

from app.schemas.schedules.base import Better, Schedule
from app.schemas.schedules.registry import SCHEDULES, LRSchedulerSpec

__all__ = ["SCHEDULES", "Better", "LRSchedulerSpec", "Schedule"]
