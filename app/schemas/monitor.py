"""How a watched metric is read: shared by early stopping and reduce-on-plateau."""

from __future__ import annotations

from typing import Literal

Mode = Literal["min", "max", "auto"]


def resolved_mode(monitor: str, mode: Mode) -> Literal["min", "max"]:
    """Keras' rule for mode auto: accuracy-like monitors are maximized, the rest minimized."""
    if mode != "auto":
        return mode
    return "max" if "acc" in monitor else "min"
