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
    """Slots for one kind of work, one set per event loop (uvicorn runs one a process).

    With `per_owner`, one owner (an API key) holds at most that many of the slots at a time,
    so one key's slow bodies queue behind each other and leave the rest to other keys.
    """

    def __init__(
        self,
        what: str,
        slots: int | Callable[[], int],
        wait_seconds: float,
        per_owner: int | None = None,
    ) -> None:
        self.what, self._slots, self.wait_seconds = what, slots, wait_seconds
        self.per_owner = per_owner
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Slots] = (
            weakref.WeakKeyDictionary()
        )

    def _state(self) -> _Slots:
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is None:
            slots = self._slots() if callable(self._slots) else self._slots
            found = self._by_loop[loop] = _Slots(asyncio.Semaphore(slots))
        return found

    async def run(self, work: Callable[[], T], owner: str | None = None) -> T:
        """Run blocking `work` in the thread pool once a slot is free (and, with per_owner, one
        of the owner's); 503 if none frees within wait_seconds."""
        state = self._state()
        deadline = asyncio.get_running_loop().time() + self.wait_seconds
        if not (owner and self.per_owner):
            return await self._run_in(state.total, work, deadline)
        mine = state.owner_slot(owner, self.per_owner)
        try:
            await self._acquire(mine, deadline)
            try:
                return await self._run_in(state.total, work, deadline)
            finally:
                mine.release()
        finally:
            state.done_with(owner)

    async def _run_in(self, slots: asyncio.Semaphore, work: Callable[[], T], deadline: float) -> T:
        await self._acquire(slots, deadline)
        try:
            return await run_in_threadpool(work)
        finally:
            slots.release()

    async def _acquire(self, slots: asyncio.Semaphore, deadline: float) -> None:
        left = max(0.0, deadline - asyncio.get_running_loop().time())
        try:
            await asyncio.wait_for(slots.acquire(), left)
        except TimeoutError:
            retry = str(max(1, round(self.wait_seconds)))
            raise HTTPException(
                503,
                f"busy: too many concurrent {self.what}; retry shortly",
                headers={"Retry-After": retry},
            ) from None


class _Slots:
    """A loop's slots, and each owner's with how many requests use it (dropped at none, so
    the map holds only the owners with a request in flight)."""

    def __init__(self, total: asyncio.Semaphore) -> None:
        self.total = total
        self.owners: dict[str, tuple[asyncio.Semaphore, int]] = {}

    def owner_slot(self, owner: str, per_owner: int) -> asyncio.Semaphore:
        slots, users = self.owners.get(owner, (asyncio.Semaphore(per_owner), 0))
        self.owners[owner] = (slots, users + 1)
        return slots

    def done_with(self, owner: str) -> None:
        slots, users = self.owners[owner]
        if users <= 1:
            del self.owners[owner]
        else:
            self.owners[owner] = (slots, users - 1)
