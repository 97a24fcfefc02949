"""A gang rank's job log in the database: each rank's log file is in its own home, which the
API may not reach, so its supervisor ships the lines here as they come.

Ranks 1..N-1 always ship; rank 0 (and a one-node job) ships when the store is not the artifacts
directory, since the API machine then shares no folder with the worker's. Otherwise rank 0's log
is the job's log file (app.domain.job_log), beside its checkpoints and model. A rank keeps its
newest MAX_TAIL_LINES lines, as many as one tail can show.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.domain.job_log import MAX_LINE_CHARS, MAX_TAIL_LINES
from app.domain.tables import RankLogLine


def append(session: Session, job_id: str, rank: int, lines: list[str]) -> None:
    """Add a rank's new lines, and drop its oldest past MAX_TAIL_LINES."""
    if not lines:
        return
    session.add_all(
        RankLogLine(job_id=job_id, rank=rank, line=line[:MAX_LINE_CHARS]) for line in lines
    )
    session.flush()
    mine = (RankLogLine.job_id == job_id, RankLogLine.rank == rank)
    newest_dropped = session.scalar(
        select(RankLogLine.id)
        .where(*mine)
        .order_by(RankLogLine.id.desc())
        .offset(MAX_TAIL_LINES)
        .limit(1)
    )
    if newest_dropped is not None:
        session.execute(delete(RankLogLine).where(*mine, RankLogLine.id <= newest_dropped))


def tail(session: Session, job_id: str, rank: int, count: int) -> tuple[list[str], bool]:
    """A rank's last `count` lines, oldest first, and whether earlier ones exist."""
    newest = session.scalars(
        select(RankLogLine.line)
        .where(RankLogLine.job_id == job_id, RankLogLine.rank == rank)
        .order_by(RankLogLine.id.desc())
        .limit(count + 1)
    ).all()
    return list(reversed(newest[:count])), len(newest) > count
