"""Live streams held to their key: at most EPOCHAL_MAX_STREAMS_PER_KEY open at once per API
process (a 429 past it), and each one closed within about a second of its key's revocation.

A key is checked when a request arrives; a stream outlives that request, so it checks its key
again every `KEY_RECHECK_SECONDS` through the key cache (app.domain.keys): a revocation made in
this process is seen at the next check, one made by another (`epochal keys revoke`, another
API process) once the cached row expires, `KEY_CACHE_SECONDS` later.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import TypeVar

from fastapi import HTTPException

from app.api.deps import key_row
from app.core.async_db import DatabaseUnavailable
from app.core.config import get_settings
from app.domain.keys import Caller

log = logging.getLogger(__name__)
KEY_RECHECK_SECONDS = 1.0
RETRY_AFTER_SECONDS = 5
T = TypeVar("T")


class StreamSlots:
    """How many streams each key holds open in this process."""

    def __init__(self) -> None:
        self.open: Counter[str] = Counter()

    def take(self, key_id: str) -> Callable[[], None]:
        """A slot for one more stream of this key (its release), or a 429 past the limit."""
        limit = get_settings().max_streams_per_key
        if self.open[key_id] >= limit:
            raise HTTPException(
                429,
                f"this key already has {limit} live event streams open here "
                "(EPOCHAL_MAX_STREAMS_PER_KEY); close one first",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self.open[key_id] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open[key_id] -= 1
                if self.open[key_id] <= 0:
                    del self.open[key_id]

        return release


STREAMS = StreamSlots()


async def key_is_live(key_id: str) -> bool:
    """False once the key is revoked or gone; True while the database cannot say."""
    try:
        row = await key_row(key_id)
    except DatabaseUnavailable:  # the stream's reads fail too; it is not the key's fault
        log.warning("could not re-check the key of a live stream", exc_info=True)
        return True
    return row is not None and not row.revoked


async def while_key_lives(key: Caller, items: AsyncGenerator[T, None]) -> AsyncIterator[T]:
    """`items` until `key` is revoked; the source yields at least every KEY_RECHECK_SECONDS
    (None when it has nothing new) for the check to keep its pace."""
    next_check = time.monotonic() + KEY_RECHECK_SECONDS
    async with aclosing(items):  # leaving early ends the source now, not when collected
        async for item in items:
            if time.monotonic() >= next_check:
                if not await key_is_live(key.id):
                    log.info("closing a live stream: its key %s was revoked", key.id)
                    return
                next_check = time.monotonic() + KEY_RECHECK_SECONDS
            yield item
