"""A job's log: the last lines of its training child's output and the supervisor's notes, of
rank 0 (the job's log file) or of another rank of a multi-node job's gang (shipped rows)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from app.api.deps import CurrentKey, JobDep, SessionDep
from app.core.config import get_settings
from app.domain import rank_log
from app.domain.job_files import JobFiles
from app.domain.job_log import MAX_TAIL_LINES, tail_lines
from app.domain.redact import job_texts, without_server_paths

router = APIRouter(prefix="/jobs", tags=["jobs"])


class JobLogPublic(BaseModel):
    job_id: str
    rank: int = Field(0, description="the gang rank (node) whose log this is")
    member: int = Field(0, description="deprecated: the same as `rank`, under its old name")
    lines: list[str] = Field(description="oldest first; empty until the job has started")
    truncated: bool = Field(description="earlier lines exist; ask for a larger `tail`")


def chosen_rank(rank: int | None, member: int | None) -> int:
    """The rank the query asks for: `rank`, or `member`, its deprecated name (0: neither)."""
    if rank is not None and member is not None and rank != member:
        raise HTTPException(
            status_code=422,
            detail=f"rank={rank} and member={member} disagree: `member` is the old name of "
            "`rank`; give one of them",
        )
    return next((given for given in (rank, member) if given is not None), 0)


@router.get("/{job_id}/logs", response_model=JobLogPublic, operation_id="get_job_logs")
def read_job_logs(
    job: JobDep,
    session: SessionDep,
    key: CurrentKey,
    tail: Annotated[int, Query(ge=1, le=MAX_TAIL_LINES)] = 200,
    rank: Annotated[
        int | None, Query(ge=0, description="a multi-node job's node rank; 0: rank 0's log")
    ] = None,
    member: Annotated[
        int | None,
        Query(ge=0, deprecated=True, description="deprecated: the old name of `rank`"),
    ] = None,
) -> JobLogPublic:
    """The last `tail` lines of the job's log (for operators: why did it fail?), each
    absolute path on the server cut to its last component (the file on disk keeps them)."""
    node = chosen_rank(rank, member)
    if node >= job.nodes:
        raise HTTPException(
            status_code=404,
            detail=f"job {job.id} has no rank {node}: it runs on {job.nodes} node(s), "
            f"ranks 0..{job.nodes - 1}",
        )
    # Shipped lines first: every rank's, and rank 0's when the store is not the artifacts
    # directory (worker.supervisor.runner); else rank 0's log file, on this machine.
    lines, truncated = rank_log.tail(session, job.id, node, tail)
    if node == 0 and not lines:
        log = JobFiles.of(get_settings().resolved_artifacts_dir, job.id).log
        lines, truncated = tail_lines(log, tail)
    hidden = job_texts(session, job, key)  # a gang's machines, for an admin only
    shown = [hidden(without_server_paths(line)) for line in lines]
    return JobLogPublic(job_id=job.id, rank=node, member=node, lines=shown, truncated=truncated)
