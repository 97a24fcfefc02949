"""Live workers: their GPUs, queues and current job, from the heartbeat rows they write."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select

from app.api.deps import CurrentKey, SessionDep
from app.core.config import get_settings
from app.domain import crud
from app.domain.tables import Job
from app.schemas.resources import WorkerPublic, WorkersPublic

router = APIRouter(prefix="/workers", tags=["workers"])


@router.get("", response_model=WorkersPublic, operation_id="list_workers")
def read_workers(session: SessionDep, key: CurrentKey) -> WorkersPublic:
    """Workers whose heartbeat is fresh (within 3 heartbeats), by name."""
    rows = crud.live_workers(session, 3 * get_settings().heartbeat_seconds)
    running = {w.current_job_id for w in rows if w.current_job_id}
    visible = running
    if not key.is_admin and running:  # another key's job id is not shown, only that it is busy
        mine = select(Job.id).where(Job.id.in_(running), Job.owner_id == key.id)
        visible = set(session.scalars(mine))
    items = [
        WorkerPublic(
            name=w.name,
            hostname=w.hostname,
            gpus=w.gpus,
            devices=w.devices,
            queues=w.queues,
            busy=w.current_job_id is not None,
            current_job_id=w.current_job_id if w.current_job_id in visible else None,
            started_at=w.started_at,
            heartbeat_at=w.heartbeat_at,
            memory_bytes=w.memory_bytes,
            disk_free_bytes=w.disk_free_bytes,
        )
        for w in sorted(rows, key=lambda w: w.name)
    ]
    return WorkersPublic(items=items)
