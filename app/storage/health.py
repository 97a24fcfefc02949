"""The store's state, as /healthz, /readyz and /metrics show it.

A probe lists a prefix nothing is ever written under: it touches the store (a dead endpoint, a
missing bucket or bad credentials show) and reads nothing. Its client tries once with short
timeouts, so a store that is down shows as down in seconds, where the service's own client
keeps retrying for its callers. Each API process probes at most once per PROBE_EVERY_SECONDS;
/healthz never waits for one (a liveness check must not hang on a dependency), it shows the last
state and starts the next probe in the background when the last one is stale.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from app.core.config import get_settings
from app.storage.base import ObjectNotFound, Store, StoreError, StoreUnavailable
from app.storage.registry import open_store

PROBE_PREFIX = ".epochal-probe/"  # never written: a listing of it is empty on a sound store
PROBE_EVERY_SECONDS = 10.0
StoreStatus = Literal["ok", "unavailable", "error", "unknown"]


@dataclass(frozen=True)
class StoreState:
    status: StoreStatus  # unavailable: down or throttling; error: refused (bucket, credentials)
    seconds: float  # how long the probe took
    checked: float  # time.monotonic() of the probe; 0 for none yet


UNKNOWN = StoreState("unknown", 0.0, 0.0)


def probe(store: Store) -> StoreState:
    """One listing of PROBE_PREFIX, timed."""
    began = time.monotonic()
    try:
        next(iter(store.list_objects(PROBE_PREFIX)), None)
        status: StoreStatus = "ok"
    except StoreUnavailable:
        status = "unavailable"
    except ObjectNotFound:  # S3 answers 404 for the bucket itself
        status = "error"
    except (StoreError, OSError):
        status = "error"
    ended = time.monotonic()
    return StoreState(status, ended - began, ended)


class StoreWatch:
    """The last probe's state, refreshed at most once per `every` seconds."""

    def __init__(self, store: Store, every: float = PROBE_EVERY_SECONDS) -> None:
        self.store, self.every = store, every
        self.state = UNKNOWN
        self._probing = threading.Lock()

    def _stale(self) -> bool:
        return self.state.checked == 0.0 or time.monotonic() - self.state.checked >= self.every

    def refresh(self) -> StoreState:
        """Probe now if the state is stale and no probe runs; the state either way (blocks)."""
        if self._stale() and self._probing.acquire(blocking=False):
            try:
                self.state = probe(self.store)
            finally:
                self._probing.release()
        return self.state

    def last(self) -> StoreState:
        """The last state at once; a stale one starts a probe in the background (whose answer
        the next call shows)."""
        state = self.state
        if self._stale() and not self._probing.locked():
            threading.Thread(target=self.refresh, name="store-probe", daemon=True).start()
        return state


@lru_cache
def store_watch() -> StoreWatch:
    """The process's watch over the store its settings name, with a quick (probing) client."""
    settings = get_settings()
    return StoreWatch(open_store(settings.resolved_store_url, settings.store_endpoint, quick=True))
