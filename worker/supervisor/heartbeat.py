"""This worker's identity, devices and heartbeat row (GET /v1/workers reads them).

GPUs are found without initializing CUDA in this process (RELIABILITY.md P12): from
EPOCHAL_WORKER_GPUS or CUDA_VISIBLE_DEVICES, with names and memory from nvidia-smi if present.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import threading
from typing import Any

from sqlalchemy import delete, update

from app.core.config import Settings, get_settings
from app.core.db import rows_changed, session_scope
from app.domain.cost import host_memory_bytes
from app.domain.tables import Worker, utcnow
from app.services.queue import queue_for_gpus

log = logging.getLogger(__name__)


def describe_gpus(ids: list[str]) -> list[dict[str, Any]]:
    """Name and memory of each GPU, asked of nvidia-smi (no CUDA in this process)."""
    devices: list[dict[str, Any]] = [{"id": g, "name": None, "memory_mb": None} for g in ids]
    if not ids or shutil.which("nvidia-smi") is None:
        return devices
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,uuid,name,memory.total",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return devices
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    for device in devices:
        # Skip what is not a row of four (nvidia-smi prints errors about a bad GPU inline).
        for index, uuid, name, memory in (row for row in rows if len(row) == 4):
            if device["id"] in (index, uuid):
                device.update(name=name, memory_mb=_megabytes(memory))
    return devices


def _megabytes(text: str) -> int | None:
    """nvidia-smi's memory.total, or None where it reports none ("[N/A]", "[Not Supported]")."""
    try:
        return int(float(text))
    except ValueError:
        return None


def queues_for(gpus: int) -> list[str]:
    """A worker with G GPUs takes jobs needing 0..G GPUs; never a bigger one."""
    return [queue_for_gpus(g) for g in range(gpus + 1)]


def worker_name(settings: Settings) -> str:
    return settings.worker_name or f"epochal@{socket.gethostname()}-{os.getpid()}"


def disk_free_bytes() -> int | None:
    """Free space where this worker writes checkpoints and models."""
    folder = get_settings().resolved_artifacts_dir
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def register(name: str, devices: list[dict[str, Any]]) -> None:
    """Insert this worker's row, or take over a row a dead worker of the same name left."""
    with session_scope() as session:
        row = session.get(Worker, name) or Worker(name=name)
        row.hostname, row.pid, row.gpus = socket.gethostname(), os.getpid(), len(devices)
        row.devices, row.queues = devices, queues_for(len(devices))
        row.memory_bytes, row.disk_free_bytes = host_memory_bytes(), disk_free_bytes()
        # A restarted worker is idle whatever its predecessor was doing when it died.
        row.current_job_id, row.started_at, row.heartbeat_at = None, utcnow(), utcnow()
        session.add(row)


def beat(name: str, devices: list[dict[str, Any]]) -> None:
    """Refresh this worker's row (or register it again if someone removed it)."""
    with session_scope() as session:
        refreshed = rows_changed(
            session,
            update(Worker)
            .where(Worker.name == name)
            .values(heartbeat_at=utcnow(), disk_free_bytes=disk_free_bytes()),
        )
    if not refreshed:
        register(name, devices)


def set_current_job(name: str, job_id: str | None) -> None:
    with session_scope() as session:
        session.execute(
            update(Worker)
            .where(Worker.name == name)
            .values(current_job_id=job_id, heartbeat_at=utcnow())
        )


def forget(name: str) -> None:
    with session_scope() as session:
        session.execute(delete(Worker).where(Worker.name == name))


class HeartbeatThread(threading.Thread):
    """Refreshes the worker row every heartbeat_seconds."""

    def __init__(self, name: str, devices: list[dict[str, Any]]) -> None:
        super().__init__(name="worker-heartbeat", daemon=True)
        self.worker, self.devices, self._stop_event = name, devices, threading.Event()

    def run(self) -> None:
        interval, step = get_settings().heartbeat_seconds, register
        while True:
            try:
                step(self.worker, self.devices)
                step = beat
            except Exception:
                log.warning("worker heartbeat failed", exc_info=True)
            if self._stop_event.wait(interval):
                return

    def stop(self) -> None:
        self._stop_event.set()
