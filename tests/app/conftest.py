"""Fixtures of the app tests that more than one module takes."""

from __future__ import annotations

import pytest

from app.api import polled


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per request seen by the polled routes' fast path: True when it answered."""
    seen: list[bool] = []
    real = polled.PolledFastPath._answer

    async def spy(self: polled.PolledFastPath, scope: dict) -> object:  # type: ignore[type-arg]
        content = await real(self, scope)
        seen.append(content is not None)
        return content

    monkeypatch.setattr(polled.PolledFastPath, "_answer", spy)
    return seen
