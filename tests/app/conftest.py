"""Fixtures of the app tests that more than one module takes."""

from __future__ import annotations

import pytest

from app.api import polled
from app.domain.keys import KEYS


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per request seen by the polled routes' fast path: True when it answered.

    Keys stay cached for the test: the fast path answers only a key in the cache, and a loaded
    box can take more than the cache's second between two requests."""
    monkeypatch.setattr(KEYS, "seconds", 3600.0)
    seen: list[bool] = []
    real = polled.PolledFastPath._answer

    async def spy(self: polled.PolledFastPath, scope: dict) -> object:  # type: ignore[type-arg]
        content = await real(self, scope)
        seen.append(content is not None)
        return content

    monkeypatch.setattr(polled.PolledFastPath, "_answer", spy)
    return seen
