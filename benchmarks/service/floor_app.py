"""The floor under every polled route: uvicorn run as the API runs it, answering each GET with a
row that one asyncpg round trip read, and nothing else (no routing, key, log line or metric).

`python -m benchmarks.service --only polling` serves it beside the API and charges its CPU per
request the same way, so what the API spends above it is the service's own cost on that box.
"""

from __future__ import annotations

import os

import asyncpg
import orjson
from starlette.types import Receive, Scope, Send

from app.core.async_db import connect_args

HEADERS = [(b"content-type", b"application/json")]


class Floor:
    """An ASGI app: one pooled connection per concurrent request, one statement per request."""

    def __init__(self) -> None:
        self.free: list[asyncpg.Connection] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # served with --lifespan off: nothing else comes
            return
        conn = self.free.pop() if self.free else await self._connect()
        try:
            row = await conn.fetchrow("SELECT $1::text AS path, now() AS at", scope["path"])
        finally:
            self.free.append(conn)
        body = orjson.dumps({"path": row["path"], "at": row["at"]})
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    async def _connect() -> asyncpg.Connection:
        return await asyncpg.connect(**connect_args(os.environ["EPOCHAL_DATABASE_URL"]))


app = Floor()
