"""Dependencies shared by the routes: a DB session per request and job lookup."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path
from sqlalchemy.orm import Session

from app import crud
from app.db import session_factory
from app.models import Job


def get_db() -> Iterator[Session]:
    with session_factory()() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_db)]


def get_job_or_404(session: SessionDep, job_id: Annotated[str, Path(max_length=64)]) -> Job:
    job = crud.get_job(session, job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return job


JobDep = Annotated[Job, Depends(get_job_or_404)]
