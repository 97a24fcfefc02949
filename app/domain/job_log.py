"""A job's log file: the training child's output plus the supervisor's notes, one per job.

The worker appends to it; GET /v1/jobs/{id}/logs reads its tail. Both sides take the path from
app.domain.job_files, from the job id (never from the user), so no request can name another file.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from app.domain.job_files import JobFiles

MAX_TAIL_BYTES = 1 << 20  # a tail never reads more than this, whatever N asks for
MAX_LINE_CHARS = 4096
_BLOCK = 64 * 1024


def append_line(job_dir: Path, text: str) -> None:
    """One timestamped line from the supervisor (O_APPEND: never splits the child's lines)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    line = f"{stamp} supervisor: {text}\n".encode()
    fd = os.open(JobFiles(job_dir).log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def tail_lines(path: Path, count: int) -> tuple[list[str], bool]:
    """The last `count` lines (each cut at MAX_LINE_CHARS) and whether earlier ones exist."""
    if count <= 0 or not path.is_file():
        return [], False
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        start, data = end, b""
        # Read backwards until there are enough newlines or the byte budget is spent.
        while start > 0 and data.count(b"\n") <= count and end - start < MAX_TAIL_BYTES:
            start = max(0, start - _BLOCK, end - MAX_TAIL_BYTES)
            f.seek(start)
            data = f.read(end - start)
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and lines:
        lines = lines[1:]  # the first one is probably cut in the middle
    more = start > 0 or len(lines) > count
    return [line[:MAX_LINE_CHARS] for line in lines[-count:]], more
