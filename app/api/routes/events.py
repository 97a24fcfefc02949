"""Live events of a job over Server-Sent Events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException
from fastapi.responses import StreamingResponse

from app.api.deps import JobDep, SessionDep, release_db
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
        }
    },
)
async def read_events(
    session: SessionDep, job: JobDep, after: Annotated[Cursor, Depends(resume_cursor)]
) -> EventStream:
    """Stream status transitions and finished epochs; ends after the terminal transition."""
    job_id = job.id
    # The request's session (and its DB slot) would be held for the whole stream; on SQLite an
    # open transaction holds the write lock. Give both back before streaming.
    await release_db(session)
    hub = get_hub(get_settings().events_poll_seconds)

    async def messages() -> AsyncIterator[bytes]:
        # Each event's bytes were made once for every subscriber (app.services.live_events):
        # sent as they are, a stream costs a write per event, not an encoding.
        async for event in hub.stream(job_id, after, KEEPALIVE_SECONDS):
            yield PING if event is None else event.wire

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return EventStream(messages(), headers=headers)
