"""Sweeps in the Python client: submit, read, list, cancel, wait (mixed into Client)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from epochal_client.types import build

SWEEP_EXIT = {"succeeded": 0, "failed": 1, "cancelled": 3}  # as for jobs: submit --follow


@dataclass
class Sweep:
    """A sweep as the API shows it (GET /v1/sweeps/{id}); list items carry no trials."""

    id: str
    name: str
    status: str
    trials_launched: int
    max_trials: int
    objective: dict[str, Any]
    created_at: datetime | None = None
    finished_at: datetime | None = None
    trials: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    best: dict[str, Any] | None = None
    best_objective: float | None = None  # the best complete trial's objective (lists too)
    epochs_spent: int = 0
    epochs_full: int = 0
    error: str | None = None  # why it failed: too many failed trials, or it could not go on
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def done(self) -> bool:
        return self.finished_at is not None


class SweepMethods:
    """The sweep calls; Client provides `_json`."""

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def submit_sweep(self, spec: Mapping[str, Any]) -> Sweep:
        """Submit a sweep; a space that can make an invalid job raises ApiError (422)."""
        return build(Sweep, self._json("POST", "/v1/sweeps", json=dict(spec)))

    def get_sweep(self, sweep_id: str) -> Sweep:
        return build(Sweep, self._json("GET", f"/v1/sweeps/{sweep_id}"))

    def sweeps(self, limit: int = 50) -> list[Sweep]:
        """Newest first; follows the cursor until `limit` are read or none are left."""
        found: list[Sweep] = []
        cursor: str | None = None
        while len(found) < limit:
            params: dict[str, Any] = {"limit": min(limit, 500)}
            if cursor:
                params["cursor"] = cursor
            page = self._json("GET", "/v1/sweeps", params=params)
            found += [build(Sweep, item) for item in page["items"]]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        return found[:limit]

    def cancel_sweep(self, sweep_id: str) -> Sweep:
        return build(Sweep, self._json("POST", f"/v1/sweeps/{sweep_id}/cancel"))

    def wait_sweep(self, sweep_id: str, timeout: float | None = None, poll: float = 2.0) -> Sweep:
        """Poll until every trial has ended; TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sweep = self.get_sweep(sweep_id)
            if sweep.done:
                return sweep
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"sweep {sweep_id} still {sweep.status} after {timeout}s")
            time.sleep(poll)
