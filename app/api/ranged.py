"""A download streamed from the store, whole (200) or one byte range of it (206).

Memory stays bounded whatever the object's size: the body is the store's chunk iterator
(Starlette runs it in its thread pool). The object is opened before the answer starts, so a
store that is down fails the request with a 503 (app.api.errors), not a cut-off body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fastapi import HTTPException
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from app.storage.base import Store, attachment

ONE_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The half-open range [start, end) a Range header asks of `size` bytes; None for the whole
    object. A header that is malformed or asks for several ranges is ignored, as RFC 9110
    allows; one that starts past the end is a 416."""
    match = ONE_RANGE.match((header or "").strip())
    if match is None or match[0] == "bytes=-":
        return None
    first, last = match[1], match[2]
    if not first:  # the last N bytes
        length = int(last)
        if length == 0:
            raise _unsatisfiable(size)
        return max(0, size - length), size
    start = int(first)
    if last and int(last) < start:  # not a range at all: ignored
        return None
    end = size if not last else min(int(last) + 1, size)
    if start >= size or end <= start:
        raise _unsatisfiable(size)
    return start, end


def _unsatisfiable(size: int) -> HTTPException:
    return HTTPException(416, "range not satisfiable", headers={"Content-Range": f"bytes */{size}"})


def stream_object(
    store: Store,
    key: str,
    size: int,
    range_header: str | None,
    media_type: str,
    filename: str,
    if_range: str | None = None,
) -> StreamingResponse:
    """The object `key` of `size` bytes as a download, or the one range asked for."""
    # No validators to compare an If-Range with: the whole object is the safe answer.
    wanted = None if if_range is not None else byte_range(range_header, size)
    start, end = wanted or (0, size)
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(end - start),
        "Content-Disposition": attachment(filename),
    }
    if wanted is not None:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    body = store.iter_bytes(key, start, end)
    status = 200 if wanted is None else 206
    return StreamingResponse(body, status_code=status, media_type=media_type, headers=headers)


def download(
    store: Store,
    key: str,
    size: int,
    request_headers: Mapping[str, str],
    media_type: str,
    filename: str,
    presign_seconds: int = 0,
) -> Response:
    """stream_object, or with presign_seconds > 0 and a store that can sign one, a 307 to a
    URL of the store (the client sends its Range again there; its API key does not go along:
    clients drop Authorization on a redirect to another origin)."""
    if presign_seconds > 0:
        url = store.presigned_get(key, presign_seconds, filename, media_type)
        if url is not None:
            return RedirectResponse(url, status_code=307, headers={"Cache-Control": "no-store"})
    range_header, if_range = request_headers.get("range"), request_headers.get("if-range")
    return stream_object(store, key, size, range_header, media_type, filename, if_range)
