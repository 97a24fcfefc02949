"""A gang member's (rank 1..N-1) log, shipped to the database as it grows: the member writes
its own file (JobFiles.member_log), on storage the API may not reach (app.domain.member_log
reads the rows)."""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from app.core.db import session_scope
from app.domain import member_log
from app.domain.job_log import MAX_TAIL_BYTES

log = logging.getLogger(__name__)


class LogShipper:
    """Sends the whole lines written to `path` since it was made; a failed send is retried
    at the next call (the lines stay in the file)."""

    def __init__(self, job_id: str, member: int, path: Path) -> None:
        self.job_id, self.member, self.path = job_id, member, path
        self.offset = path.stat().st_size if path.exists() else 0  # earlier attempts' lines

    def ship(self) -> None:
        """Send the new whole lines (at most MAX_TAIL_BYTES a call, a runaway log's bound)."""
        try:
            with self.path.open("rb") as f:
                self.offset = min(self.offset, f.seek(0, 2))  # truncated meanwhile
                f.seek(self.offset)
                data = f.read(MAX_TAIL_BYTES)
        except OSError:
            return
        whole = data[: data.rfind(b"\n") + 1]
        if not whole:
            return
        lines = whole.decode("utf-8", errors="replace").splitlines()
        try:
            with session_scope() as session:
                member_log.append(session, self.job_id, self.member, lines)
        except SQLAlchemyError:  # the database is away: the lines wait in the file
            log.warning("could not ship job %s's member log", self.job_id, exc_info=True)
            return
        self.offset += len(whole)

    def dropped(self, count: int) -> None:
        """The log's oldest `count` bytes were cut (cap_log): the unsent ones moved up."""
        self.offset = max(0, self.offset - count)
