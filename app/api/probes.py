"""A small bound on the unauthenticated probes' work (/metrics, /readyz), per API process.

Each may hit the database, and anyone can call them: without a bound, a flood of scrapes takes
the database connections and threads that authenticated requests need. At most PROBE_SLOTS run
at once; a request waits up to PROBE_WAIT_SECONDS for a slot, then gets a 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

from fastapi import HTTPException
from fastapi.concurrency import run_in_threadpool

PROBE_SLOTS = 2
PROBE_WAIT_SECONDS = 1.0
T = TypeVar("T")
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _by_loop.get(loop)
    if slots is None:
        slots = _by_loop[loop] = asyncio.Semaphore(PROBE_SLOTS)
    return slots


async def bounded(work: Callable[[], T]) -> T:
    """Run blocking `work` in the thread pool once a probe slot is free; 503 if none frees."""
    slots = _slots()
    try:
        await asyncio.wait_for(slots.acquire(), PROBE_WAIT_SECONDS)
    except TimeoutError:
        raise HTTPException(
            503, "busy: too many concurrent probe requests", headers={"Retry-After": "1"}
        ) from None
    try:
        return await run_in_threadpool(work)
    finally:
        slots.release()
