"""Absolute server paths out of what a client is told: an error names the file it is about,
never where the server keeps it (RELIABILITY.md §10c).

Messages built by epochal name files by their role; messages passed on from libraries (an
OSError, ONNX Runtime, numpy) may carry a full path, so every answer's text goes through
`without_server_paths`. An API path (`/v1/...`) is not a server path and is kept.
"""

from __future__ import annotations

import re

# Two or more components after a leading slash that does not follow a word, a dot, a colon or
# a slash (so no URL, ratio or media type); the API's own routes are kept.
_PATH = re.compile(
    r"(?<![\w.:/~-])/(?!v1/)(?:[^\s/'\"`:,;()\[\]{}<>]+/)+([^\s/'\"`:,;()\[\]{}<>]*)"
)


def without_server_paths(text: str) -> str:
    """`text` with each absolute path cut to its last component: `…/model.onnx`."""
    return _PATH.sub(lambda m: f"…/{m.group(1)}" if m.group(1) else "…/", text)
