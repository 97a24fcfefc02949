"""Live workers: their GPUs, queues and current job, from the heartbeat rows they write.

An admin key sees each worker in full; any other key a summary, enough to see capacity and
what is busy: no hostname (nor the host in the worker's name), GPU ids, memory or disk.
"""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select

from app.api.deps import CurrentKey, SessionDep
from app.core.config import get_settings
from app.domain import worker_reads
from app.domain.keys import Caller
from app.domain.redact import public_worker_name
from app.domain.tables import Job, Worker
from app.schemas.resources import WorkerPublic, WorkersPublic

router = APIRouter(prefix="/workers", tags=["workers"])


def shown(worker: Worker, key: Caller, job_id: str | None) -> WorkerPublic:
    """`worker` as `key` may see it (`job_id`: its current job if the key may see that)."""
    common = {
        "gpus": worker.gpus,
        "queues": worker.queues,
        "busy": worker.current_job_id is not None,
        "current_job_id": job_id,
        "started_at": worker.started_at,
        "heartbeat_at": worker.heartbeat_at,
    }
    if not key.is_admin:
        return WorkerPublic(name=public_worker_name(worker.name), **common)
    return WorkerPublic(
        name=worker.name,
        hostname=worker.hostname,
        devices=worker.devices,
        memory_bytes=worker.memory_bytes,
        disk_free_bytes=worker.disk_free_bytes,
        **common,
    )


@router.get("", response_model=WorkersPublic, operation_id="list_workers")
def read_workers(session: SessionDep, key: CurrentKey) -> WorkersPublic:
    """Workers whose heartbeat is fresh (within 3 heartbeats), by name; in full for an admin
    key, else a summary without hostnames, GPU ids, memory or disk."""
    rows = worker_reads.live_workers(session, 3 * get_settings().heartbeat_seconds)
    running = {w.current_job_id for w in rows if w.current_job_id}
    visible = running
    if not key.is_admin and running:  # another key's job id is not shown, only that it is busy
        mine = select(Job.id).where(Job.id.in_(running), Job.owner_id == key.id)
        visible = set(session.scalars(mine))
    ordered = sorted(rows, key=lambda w: w.name)
    items = [
        shown(w, key, w.current_job_id if w.current_job_id in visible else None) for w in ordered
    ]
    return WorkersPublic(items=items)
