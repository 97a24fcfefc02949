"""A request body limit that counts streamed bytes instead of trusting Content-Length (P44)."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import problem


class BodySizeLimit:
    """Answer 413 once a request body passes its limit (uploads have their own, larger one)."""

    def __init__(self, app: ASGIApp, max_bytes: int, upload_bytes: int | None = None) -> None:
        self.app, self.max_bytes, self.upload_bytes = app, max_bytes, upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit_for(scope)

        def too_large() -> Any:  # made only when needed: a response costs ~50 us to build
            return problem(413, f"request body over {limit} bytes")

        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await too_large()(scope, receive, send)
            return
        seen, answered, started = 0, False, False

        async def counting_receive() -> Message:
            nonlocal seen, answered
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit and not answered:
                answered = True
                if not started:
                    await too_large()(scope, receive, send)
                # The app sees the client go away and stops; its own answer is dropped below.
                return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counting_receive, guarded_send)

    def _limit_for(self, scope: Scope) -> int:
        if self.upload_bytes and scope.get("path", "").startswith("/v1/datasets"):
            return self.upload_bytes
        return self.max_bytes
