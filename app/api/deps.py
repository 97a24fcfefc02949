"""Dependencies shared by the routes: a DB session per request, the caller's key, job lookup."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app import crud
from app.db import session_factory
from app.models import ApiKey, Job
from app.security import verify

bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")


def get_db() -> Iterator[Session]:
    with session_factory()() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_db)]


def current_key(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> ApiKey:
    """The caller's live API key; 401 without one (missing, unknown or revoked)."""
    key = verify(session, credentials.credentials) if credentials else None
    if key is None:
        raise HTTPException(
            status_code=401,
            detail="a valid API key is required: Authorization: Bearer <key>",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return key


CurrentKey = Annotated[ApiKey, Depends(current_key)]


def owner_filter(key: ApiKey) -> str | None:
    """None for an admin (sees everything), else the key's id."""
    return None if key.is_admin else key.id


def get_job_or_404(
    session: SessionDep,
    key: CurrentKey,
    # Job ids are UUIDs: anything else (a NUL byte would make PostgreSQL fail) is a 422.
    job_id: Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9-]+$")],
) -> Job:
    """The job if it exists and the caller may see it; another owner's job is a 404 too."""
    job = crud.get_job(session, job_id)
    if job is None or (not key.is_admin and job.owner_id != key.id):
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return job


JobDep = Annotated[Job, Depends(get_job_or_404)]
