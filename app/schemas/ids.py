"""The id of a job, sweep or upload: its shape and how one is made (pure stdlib).

Ours are UUIDs; anything else is refused by its shape before it reaches a query or a path
(PostgreSQL answers a NUL in text with an error, not "no row"; an id names a folder on disk).
"""

from __future__ import annotations

import re
import uuid

ID_MAX_LENGTH = 64
_ALPHABET = "A-Za-z0-9-"
# Unanchored, to sit inside a larger pattern (a route's path); match it whole (fullmatch).
ID_PART = f"[{_ALPHABET}]{{1,{ID_MAX_LENGTH}}}"
ID_PATTERN = f"^{ID_PART}$"
# The characters alone, for FastAPI parameters that bound the length apart (max_length).
ID_CHARS = f"^[{_ALPHABET}]+$"
_ID = re.compile(ID_PART)


def new_id() -> str:
    return str(uuid.uuid4())


def is_id(value: object) -> bool:
    """Whether `value` has the shape of an id (a str, matched whole)."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None
