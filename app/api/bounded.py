"""A per-process bound on one kind of blocking work: at most `slots` run at once in the thread
pool, and a request that waits `wait_seconds` for a slot gets a 503 with Retry-After.

Work that holds the GIL (validating specs) or a core (ONNX Runtime) slows the event loop's own
thread once many threads do it at once; the bound keeps what one process takes on to a few.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

from fastapi import HTTPException
from fastapi.concurrency import run_in_threadpool

T = TypeVar("T")


class WorkBound:
    """Slots for one kind of work, one semaphore per event loop (uvicorn runs one a process)."""

    def __init__(self, what: str, slots: int | Callable[[], int], wait_seconds: float) -> None:
        self.what, self._slots, self.wait_seconds = what, slots, wait_seconds
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is None:
            slots = self._slots() if callable(self._slots) else self._slots
            found = self._by_loop[loop] = asyncio.Semaphore(slots)
        return found

    async def run(self, work: Callable[[], T]) -> T:
        """Run blocking `work` in the thread pool once a slot is free; 503 if none frees."""
        slots = self._semaphore()
        try:
            await asyncio.wait_for(slots.acquire(), self.wait_seconds)
        except TimeoutError:
            retry = str(max(1, round(self.wait_seconds)))
            raise HTTPException(
                503,
                f"busy: too many concurrent {self.what}; retry shortly",
                headers={"Retry-After": retry},
            ) from None
        try:
            return await run_in_threadpool(work)
        finally:
            slots.release()
