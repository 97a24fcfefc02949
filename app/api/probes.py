"""A small bound on the unauthenticated probes' work (/metrics, /readyz), per API process.

Each may hit the database, and anyone can call them: without a bound, a flood of scrapes takes
the database connections and threads that authenticated requests need. At most PROBE_SLOTS run
at once; a request waits up to PROBE_WAIT_SECONDS for a slot, then gets a 503 with Retry-After.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from app.api.bounded import WorkBound

PROBE_SLOTS = 2
PROBE_WAIT_SECONDS = 1.0
T = TypeVar("T")
PROBES = WorkBound("probe requests", PROBE_SLOTS, PROBE_WAIT_SECONDS)


async def bounded(work: Callable[[], T]) -> T:
    """Run blocking `work` in the thread pool once a probe slot is free; 503 if none frees."""
    return await PROBES.run(work)
