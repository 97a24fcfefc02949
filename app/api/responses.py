"""JSON answers of the routes polled most, written by orjson from plain dicts: the bytes
pydantic writes for the same model (UTC as `Z`, non-finite floats as null) without validating
the rows into models and dumping them again."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


class FastJSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_UTC_Z)
