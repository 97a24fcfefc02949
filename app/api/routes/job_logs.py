"""A job's log: the last lines of its training child's output and the supervisor's notes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from app.api.deps import JobDep
from app.core.config import get_settings
from app.domain.job_files import JobFiles
from app.domain.job_log import tail_lines
from app.domain.redact import without_server_paths

router = APIRouter(prefix="/jobs", tags=["jobs"])


class JobLogPublic(BaseModel):
    job_id: str
    lines: list[str] = Field(description="oldest first; empty until the job has started")
    truncated: bool = Field(description="earlier lines exist; ask for a larger `tail`")


@router.get("/{job_id}/logs", response_model=JobLogPublic, operation_id="get_job_logs")
def read_job_logs(job: JobDep, tail: Annotated[int, Query(ge=1, le=5000)] = 200) -> JobLogPublic:
    """The last `tail` lines of the job's log (for operators: why did it fail?), each
    absolute path on the server cut to its last component (the file on disk keeps them)."""
    lines, truncated = tail_lines(
        JobFiles.of(get_settings().resolved_artifacts_dir, job.id).log, tail
    )
    shown = [without_server_paths(line) for line in lines]
    return JobLogPublic(job_id=job.id, lines=shown, truncated=truncated)
