"""Page cursors of /v1/jobs and /v1/sweeps: opaque to clients, checked when they come back."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Protocol

from app.schemas.ids import is_id


class Paged(Protocol):
    """A row that pages by (created_at, id)."""

    id: str
    created_at: datetime


def encode_cursor(job: Paged) -> str:
    """The cursor of the page after `job`: its time and id, base64url JSON."""
    return cursor_after(job.created_at, job.id)


def cursor_after(created_at: datetime, row_id: str) -> str:
    """The cursor of the page after the row made at `created_at` with this id."""
    raw = json.dumps([created_at.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Raise ValueError for anything that is not a cursor this service made."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, job_id = json.loads(raw)
        at = datetime.fromisoformat(created)
        if at.tzinfo is None or not is_id(job_id):
            raise ValueError(job_id)  # a NUL or surrogate in the id would be a 500 on PostgreSQL
        return at, job_id
    except Exception as exc:  # any malformed input is the client's mistake
        raise ValueError("cursor is not one returned by this API") from exc
