"""One gate for every route's path and query: no control characters, no broken UTF-8, no
overlong URLs.

PostgreSQL refuses NUL in text and a CR/LF in a path would forge access-log lines, so such
requests end here with a 4xx instead of in whichever route forgot to pattern its parameter.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import problem

MAX_PATH_CHARS = 8192
MAX_QUERY_BYTES = 8192
# Controls (NUL, CR, LF, ESC, DEL, C1), lone surrogates, private use, and code points this
# Python's Unicode database has not assigned (noncharacters such as U+FFFF among them).
REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})


def url_problem(path: str, raw_path: bytes | None, query: bytes) -> tuple[int, str] | None:
    """(status, why) when the request line cannot be served safely, else None."""
    if len(path) > MAX_PATH_CHARS or len(query) > MAX_QUERY_BYTES:
        return 414, f"URL over {MAX_PATH_CHARS} characters of path or {MAX_QUERY_BYTES} of query"
    for part in (raw_path or path.encode("utf-8", "surrogatepass"), query.replace(b"+", b" ")):
        try:
            text = unquote_to_bytes(part).decode("utf-8")
        except UnicodeDecodeError:
            return 400, "the URL is not valid percent-encoded UTF-8"
        # The common case, printable ASCII, in one C-level check before the per-character one.
        if not (text.isascii() and text.isprintable()) and any(bad_character(c) for c in text):
            return 400, "the URL holds a control, surrogate or unassigned character"
    return None


def bad_character(char: str) -> bool:
    """True for a control (NUL, CR, LF, ESC, DEL, C1), surrogate, private-use or unassigned one."""
    if char.isascii():
        return not char.isprintable()
    return unicodedata.category(char) in REFUSED_CATEGORIES


class CleanUrl:
    """Answer 400 (414 when overlong) before routing when the path or query is hostile."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # the app serves no websockets
            found = url_problem(
                scope.get("path", ""), scope.get("raw_path"), scope.get("query_string", b"")
            )
            if found is not None:
                await problem(*found)(scope, receive, send)
                return
        await self.app(scope, receive, send)
