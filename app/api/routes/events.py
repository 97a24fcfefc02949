"""Live events of a job over Server-Sent Events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException
from fastapi.sse import EventSourceResponse, ServerSentEvent

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


@router.get(
    "/{job_id}/events",
    response_class=EventSourceResponse,
    responses={200: {"description": "event: transition | epoch; data: JSON; id: resume cursor"}},
)
async def read_events(
    session: SessionDep, job: JobDep, after: Annotated[Cursor, Depends(resume_cursor)]
) -> AsyncIterator[ServerSentEvent]:
    """Stream status transitions and finished epochs; ends after the terminal transition."""
    job_id = job.id
    # The request's session (and its DB slot) would be held for the whole stream; on SQLite an
    # open transaction holds the write lock. Give both back before streaming.
    await release_db(session)
    hub = get_hub(get_settings().events_poll_seconds)
    async for event in hub.stream(job_id, after):
        yield ServerSentEvent(event=event.kind, id=event.id, raw_data=event.payload)
