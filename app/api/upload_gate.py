"""An upload's key is checked before its body is read.

FastAPI parses a multipart form (spooling the file to a temporary file) before it runs a
route's dependencies, so `POST /v1/datasets` without a valid key used to read and spool up to
EPOCHAL_MAX_UPLOAD_BYTES before its 401. This gate, in front of the app, answers that 401 from
the Authorization header alone (and the key cache) without receiving a byte of the body; the
route's own dependency checks the key again, from the cache.
"""

from __future__ import annotations

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import caller_for
from app.api.errors import problem, unavailable
from app.core.async_db import DatabaseUnavailable

# Routes whose body is a form parsed before the dependencies run: (method, path).
FORM_ROUTES = frozenset({("POST", "/v1/datasets")})


class UploadAuthGate:
    """401 for a form route's request whose Authorization header holds no live key."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._guarded(scope):
            refusal = await self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refusal(scope: Scope) -> JSONResponse | None:
        try:
            await caller_for(Headers(scope=scope).get("authorization"))
        except HTTPException as exc:
            response = problem(exc.status_code, str(exc.detail))
            response.headers.update(exc.headers or {})
            return response
        except DatabaseUnavailable as exc:
            return unavailable(scope["method"], scope["path"], exc)
        return None

    @staticmethod
    def _guarded(scope: Scope) -> bool:
        path = scope.get("path", "")
        return (scope.get("method", ""), path.rstrip("/") or path) in FORM_ROUTES
