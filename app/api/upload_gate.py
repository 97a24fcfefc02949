"""An upload's key is checked, and its key's uploads in flight counted, before its body is read.

FastAPI parses a multipart form (spooling the file to a temporary file) before it runs a
route's dependencies, so `POST /v1/datasets` without a valid key used to read and spool up to
EPOCHAL_MAX_UPLOAD_BYTES before its 401. This gate, in front of the app, answers that 401 from
the Authorization header alone (and the key cache) without receiving a byte of the body; the
route's own dependency checks the key again, from the cache.

An upload holds a file, its arrays and their stored copy in the API process while it is
parsed: at most EPOCHAL_MAX_UPLOADS_PER_KEY of one key run at once in each API process, and
the next is a 429 before its body is read, so one key cannot take every process's memory.
"""

from __future__ import annotations

from collections import Counter

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import caller_for
from app.api.errors import problem, unavailable
from app.core.async_db import DatabaseUnavailable
from app.core.config import get_settings
from app.domain.keys import Caller

# Routes whose body is a form parsed before the dependencies run: (method, path).
FORM_ROUTES = frozenset({("POST", "/v1/datasets")})
RETRY_AFTER_SECONDS = 5


class UploadSlots:
    """How many uploads each key has in flight in this process (the event loop's alone)."""

    def __init__(self) -> None:
        self.held: Counter[str] = Counter()

    def take(self, key_id: str) -> bool:
        """One more upload of this key, if it has a slot left."""
        if self.held[key_id] >= get_settings().max_uploads_per_key:
            return False
        self.held[key_id] += 1
        return True

    def give_back(self, key_id: str) -> None:
        self.held[key_id] -= 1
        if self.held[key_id] <= 0:
            del self.held[key_id]


UPLOADS = UploadSlots()


class UploadAuthGate:
    """401 for a form route's request whose Authorization header holds no live key; 429 for
    one whose key has its uploads' worth in flight already."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._guarded(scope):
            await self.app(scope, receive, send)
            return
        found = await self._caller(scope)
        if isinstance(found, Caller) and not UPLOADS.take(found.id):
            found = _busy()
        if not isinstance(found, Caller):
            await found(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            UPLOADS.give_back(found.id)

    @staticmethod
    async def _caller(scope: Scope) -> Caller | JSONResponse:
        """The live key of the request, or the answer that refuses it."""
        try:
            return await caller_for(Headers(scope=scope).get("authorization"))
        except HTTPException as exc:
            response = problem(exc.status_code, str(exc.detail))
            response.headers.update(exc.headers or {})
            return response
        except DatabaseUnavailable as exc:
            return unavailable(scope["method"], scope["path"], exc)

    @staticmethod
    def _guarded(scope: Scope) -> bool:
        path = scope.get("path", "")
        return (scope.get("method", ""), path.rstrip("/") or path) in FORM_ROUTES


def _busy() -> JSONResponse:
    limit = get_settings().max_uploads_per_key
    response = problem(
        429,
        f"this key already has {limit} uploads in progress here (EPOCHAL_MAX_UPLOADS_PER_KEY); "
        "retry when one has finished",
    )
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
