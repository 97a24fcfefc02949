"""A gang rank's (1..N-1) log, shipped to the database as it grows: the rank writes its own
file (JobFiles.rank_log), on storage the API may not reach (app.domain.rank_log reads the
rows)."""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from app.core.db import session_scope
from app.domain import rank_log
from app.domain.job_log import MAX_LINE_CHARS, MAX_TAIL_BYTES, MAX_TAIL_LINES

log = logging.getLogger(__name__)

# One send's bound: more lines than a rank keeps would be dropped at once anyway.
MAX_SHIP_LINES = MAX_TAIL_LINES
CUT_MARKER = " [line cut]"


class LogShipper:
    """Sends the lines written to `path` since it was made; a failed send is retried at the
    next call (the lines stay in the file). A line longer than one read goes cut, with a
    marker, and the rest of it is skipped: it never holds up the lines after it."""

    def __init__(self, job_id: str, rank: int, path: Path) -> None:
        self.job_id, self.rank, self.path = job_id, rank, path
        self.offset = path.stat().st_size if path.exists() else 0  # earlier attempts' lines
        self.skipping = False  # inside a cut line: its rest is dropped up to its newline

    def ship(self, final: bool = False) -> None:
        """Send the new whole lines (MAX_TAIL_BYTES and MAX_SHIP_LINES a send, a runaway log's
        bound). `final`: the rank is done, so every line left goes, an unended last one too."""
        while self._ship_once(final) and final:
            pass

    def _ship_once(self, final: bool) -> bool:
        """One send; whether it moved on (there may be more)."""
        try:
            with self.path.open("rb") as f:
                self.offset = min(self.offset, f.seek(0, 2))  # truncated meanwhile
                f.seek(self.offset)
                data = f.read(MAX_TAIL_BYTES)
        except OSError:
            return False
        lines, used, skipping = self._take(data, final)
        if used == 0:
            return False
        try:
            with session_scope() as session:
                rank_log.append(session, self.job_id, self.rank, lines)
        except SQLAlchemyError:  # the database is away: the lines wait in the file
            log.warning(
                "could not ship job %s's rank %d log", self.job_id, self.rank, exc_info=True
            )
            return False
        self.offset += used
        self.skipping = skipping
        return True

    def _take(self, data: bytes, final: bool) -> tuple[list[str], int, bool]:
        """The lines to send from `data`, how many of its bytes they use, and whether a cut
        line's rest comes next."""
        start = 0
        if self.skipping:  # the cut line's rest, up to and with its newline
            start = data.find(b"\n") + 1
            if start == 0:
                return [], len(data), True
        body = data[start:]
        whole = body[: body.rfind(b"\n") + 1]
        if not whole and start == 0 and len(data) == MAX_TAIL_BYTES:  # one line, too long
            return [_cut(body.decode("utf-8", errors="replace"))], len(body), True
        if final and len(data) < MAX_TAIL_BYTES:
            whole = body  # the last line may be unended: the rank has stopped writing
        if whole.count(b"\n") >= MAX_SHIP_LINES:
            whole = b"\n".join(whole.split(b"\n", MAX_SHIP_LINES)[:MAX_SHIP_LINES]) + b"\n"
        lines = whole.decode("utf-8", errors="replace").splitlines()
        return [_cut(line) for line in lines], start + len(whole), False

    def dropped(self, count: int) -> None:
        """The log's oldest `count` bytes were cut (cap_log): the unsent ones moved up."""
        if count > self.offset:  # a cut line's rest went with the head
            self.skipping = False
        self.offset = max(0, self.offset - count)


def _cut(line: str) -> str:
    """A line as a rank's log row keeps it: past MAX_LINE_CHARS, cut and marked."""
    if len(line) <= MAX_LINE_CHARS:
        return line
    return line[: MAX_LINE_CHARS - len(CUT_MARKER)] + CUT_MARKER
