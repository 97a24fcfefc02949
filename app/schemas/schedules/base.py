"""What every learning-rate schedule is: a strict spec model that also knows its rule.

The rate is set per epoch (as the seeds' StepLR), epoch index e counting from 0, once for both
back-ends. A closed-form schedule says the rate of each epoch; a schedule that reacts to a
metric watches it and, after each epoch, turns its state (JSON, kept in the checkpoint) and the
epoch's value into the next rate. Pure: the worker brings the comparison (Keras' rule).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.schemas.monitor import Mode
from app.schemas.strict import StrictModel

# is `value` better than the reference (None: nothing yet)? Keras' monitor comparison.
Better = Callable[[float, float | None], bool]


class Schedule(StrictModel):
    """A learning-rate schedule. Subclasses set `name` (a Literal) and their bounded fields."""

    name: str

    def epoch_rate(self, base_lr: float, epoch_index: int, epochs: int) -> float | None:
        """The rate of epoch `epoch_index` (0-based) of `epochs`; None: the rate is what the
        end of the last epoch left (a schedule that reacts to a metric)."""
        return None

    def watches(self) -> tuple[str, Mode, float] | None:
        """(monitor, mode, min_delta) of the metric the schedule reacts to; None: none."""
        return None

    def initial_state(self) -> dict[str, Any]:
        """What the rule carries from epoch to epoch (and a resumed attempt restores)."""
        return {}

    def next_rate(
        self, state: dict[str, Any], value: float | None, rate: float, better: Better
    ) -> float:
        """After an epoch whose watched value was `value` at `rate`: the next epoch's rate
        (state updated in place)."""
        return rate
