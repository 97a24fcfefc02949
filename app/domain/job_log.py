"""A job's log file: the training child's output plus the supervisor's notes, one per job
(and one per node of a multi-node job: JobFiles.rank_log).

The worker appends to it; GET /v1/jobs/{id}/logs reads its tail. Both sides take the path from
app.domain.job_files, from the job id (never from the user), so no request can name another file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

MAX_TAIL_BYTES = 1 << 20  # a tail never reads more than this, whatever N asks for
MAX_TAIL_LINES = 5000  # the most lines one tail shows (and a gang rank's log keeps)
MAX_LINE_CHARS = 4096
_BLOCK = 64 * 1024


def append_line(log: Path, text: str) -> None:
    """One timestamped line from the supervisor (O_APPEND: never splits the child's lines)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    line = f"{stamp} supervisor: {text}\n".encode()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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


def cap_log(path: Path, max_bytes: int) -> int:
    """Past max_bytes, keep the newest half of a job's log; how many bytes were dropped.

    Writers hold O_APPEND descriptors (the child's stdout, the supervisor's notes), so the file
    cannot be swapped for a new one. Where the filesystem can (ext4, XFS), the head is cut out
    in place with fallocate(COLLAPSE_RANGE): appends go on at the new end and nothing is lost.
    Elsewhere the tail is copied and written back after a truncate; a line the child writes in
    that instant can be lost, which a log already losing its oldest half can afford.
    """
    try:
        size = path.stat().st_size
        if max_bytes <= 0 or size <= max_bytes:
            return 0
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        try:
            start = size - max_bytes // 2
            dropped = _collapse(fd, start) or _rewrite_tail(fd, start)
        finally:
            os.close(fd)
        append_line(path, f"{path.name} passed {max_bytes} bytes: dropped the oldest {dropped}")
    except OSError:  # a log that cannot be capped (gone, disk full) must not stop training
        return 0
    return dropped


def _collapse(fd: int, drop: int) -> int:
    """Remove the first `drop` bytes (rounded down to whole blocks) in place; 0 if unsupported."""
    block = os.fstat(fd).st_blksize or 4096
    drop -= drop % block
    libc = _libc()
    if drop <= 0 or libc is None:
        return 0
    collapse_range = 0x08  # FALLOC_FL_COLLAPSE_RANGE, linux/falloc.h
    failed = libc.fallocate(fd, collapse_range, ctypes.c_long(0), ctypes.c_long(drop))
    return 0 if failed else drop


def _rewrite_tail(fd: int, start: int) -> int:
    """Copy from the first line after `start` to the end, truncate, append it back."""
    tail = os.pread(fd, os.fstat(fd).st_size - start, start)
    newline = tail.find(b"\n")
    tail = tail[newline + 1 :] if newline >= 0 else tail
    dropped = os.fstat(fd).st_size - len(tail)
    os.ftruncate(fd, 0)
    os.write(fd, tail)  # O_APPEND: after anything written since the truncate
    return dropped


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, for fallocate(2) (Linux); None where there is none to load."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name and sys.platform == "linux" else None
    except OSError:
        return None
