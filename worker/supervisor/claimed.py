"""What a worker's claim hands back (worker.supervisor.wakeup.claim), as one typed value the
runner branches on: an attempt it holds (Claimed), or a seat in a forming gang (TakenSeat),
which becomes an attempt when the gang forms (worker.supervisor.gang_seat.Formed.claimed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.scheduler.gang import TakenSeat


@dataclass(frozen=True)
class Claimed:
    """An attempt this worker holds: the job is running under its name."""

    job_id: str
    attempt: int
    spec: Any  # the stored spec as JSON: the runner validates it once
    started_at: datetime  # the first start: max_runtime_seconds counts from it
    memory_bytes: int | None  # the admitted estimate: the basis of the memory limit


Claim = Claimed | TakenSeat  # None where nothing was claimed: no job fits, or it was taken
