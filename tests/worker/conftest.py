"""Worker tests share one process: a training child a test left waiting must not serve the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def no_waiting_child() -> Iterator[None]:
    """Kill the standby child a test's run_job started (its environment was that test's)."""
    yield
    from worker.supervisor.standby import POOL

    POOL.close()
