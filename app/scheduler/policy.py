"""The order of the queue, in pure Python: priority first, then fair share, then age.

Between keys of equal priority the next job goes to the key whose recent usage (slot-seconds
in the window, divided by its weight) is least. Usages within `tolerance` of the least count as
level: of those keys the one that started a job longest ago goes first, so two keys with the
same kind of jobs alternate even though no two jobs take exactly the same time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Share:
    """One key competing at a priority: its usage, weight, last start and oldest queued job."""

    owner: str | None
    used: float
    weight: float
    last_start: datetime | None
    oldest: datetime

    @property
    def load(self) -> float:
        """Usage against the key's weight (a weight of 2 may use twice as much)."""
        return self.used / self.weight if self.weight > 0 else float("inf")


def fair_order(shares: Sequence[Share], tolerance: float) -> list[Share]:
    """The keys in the order their next job runs."""
    left, ordered = list(shares), []
    while left:
        low = min(share.load for share in left)
        level = [share for share in left if share.load <= low * (1 + tolerance)]
        best = min(level, key=lambda s: (s.last_start or NEVER, s.oldest, s.owner or ""))
        ordered.append(best)
        left.remove(best)
    return ordered


def priority_problem(
    priority: int, preemptible: bool, *, is_admin: bool, max_priority: int | None
) -> str | None:
    """Why a key may not submit a job with this priority and preemptibility (None: it may)."""
    if max_priority is not None and priority > max_priority and not is_admin:
        return f"this key may ask priority {max_priority} at most, not {priority}"
    if not preemptible and not is_admin:
        return "only an admin key may submit a job with preemptible: false"
    return None
