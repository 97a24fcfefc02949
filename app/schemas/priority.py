"""A job's priority: its bounds and default, once (pure stdlib; app.scheduler orders by it)."""

from __future__ import annotations

PRIORITY_MIN = 0
PRIORITY_MAX = 100
PRIORITY_DEFAULT = 50
