"""Live events of a job over Server-Sent Events."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.api.deps import CurrentKey, JobDep, SessionDep, release_db
from app.api.errors import documented
from app.api.stream_guard import KEY_RECHECK_SECONDS, STREAMS, while_key_lives
from app.core.config import get_settings
from app.services.live_events import Cursor, get_hub

router = APIRouter(prefix="/jobs", tags=["jobs"])


def resume_cursor(
    last_event_id: Annotated[
        str | None,
        Header(max_length=64, description="the id of the last event received, to resume"),
    ] = None,
) -> Cursor:
    try:
        return Cursor.parse(last_event_id)
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc


class EventStream(StreamingResponse):
    media_type = "text/event-stream"
    on_close: Callable[[], None] | None = None  # called once the stream is over, however

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:  # streamed to the end, the client gone, or never started: the slot is free
            if self.on_close is not None:
                self.on_close()


# A comment line after this long without an event, so proxies keep an idle stream open.
KEEPALIVE_SECONDS = 15.0
PING = b": ping\n\n"


@router.get(
    "/{job_id}/events",
    response_class=EventStream,
    operation_id="stream_events",
    responses={
        200: {
            "description": "event: transition | epoch; data: JSON; id: resume cursor",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        429: documented("the key has EPOCHAL_MAX_STREAMS_PER_KEY streams open already"),
    },
)
async def read_events(
    session: SessionDep,
    key: CurrentKey,
    job: JobDep,
    after: Annotated[Cursor, Depends(resume_cursor)],
) -> EventStream:
    """Stream status transitions and finished epochs; ends after the terminal transition, or
    within about a second of the key's revocation. At most EPOCHAL_MAX_STREAMS_PER_KEY at once
    per key and API process: 429 past it."""
    job_id = job.id
    # The request's session (and its DB slot) would be held for the whole stream; on SQLite an
    # open transaction holds the write lock. Give both back before streaming.
    await release_db(session)
    hub = get_hub(get_settings().events_poll_seconds)

    async def messages() -> AsyncIterator[bytes]:
        # Each event's bytes were made once for every subscriber (app.services.live_events):
        # sent as they are, a stream costs a write per event, not an encoding.
        quiet_since = time.monotonic()
        source = hub.stream(job_id, after, KEY_RECHECK_SECONDS)
        async for event in while_key_lives(key, source):
            if event is not None:
                quiet_since = time.monotonic()
                yield event.wire
            elif time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                quiet_since = time.monotonic()
                yield PING

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    release = STREAMS.take(key.id)  # last: nothing can fail between this and the response
    stream = EventStream(messages(), headers=headers)
    stream.on_close = release
    return stream
