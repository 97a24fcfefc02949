"""The queue as the API shows it: a queued job's standing, and GET /v1/queue."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

OTHER_KEYS = "other keys"  # how the queue labels jobs of keys but the caller's


class QueueStanding(BaseModel):
    """Where a queued job stands among the jobs competing for the same workers."""

    position: int | None = Field(
        description="1 = the next to run on a worker that fits it; null until the scheduler "
        "worked it out (within a maintenance round of the submit)"
    )
    reason: str = Field(description="why it waits, in words")
    estimated_start: datetime | None = Field(
        description="from the running jobs' measured epoch times; null when nothing says"
    )


class QueueEntry(QueueStanding):
    """A queued job the caller may see in full."""

    id: str
    name: str
    owner_id: str | None
    priority: int
    gpus: int
    created_at: datetime


class QueueCount(BaseModel):
    """Other keys' queued jobs at one priority: neither the jobs' ids and names nor the keys'
    ids are shown."""

    owner_id: str | None = Field(None, description="never set: another key's id is not shown")
    owner: str = Field(OTHER_KEYS, description=f'"{OTHER_KEYS}", whoever they are')
    priority: int
    jobs: int


class QueuePublic(BaseModel):
    """The queue as the scheduler sees it: the caller's jobs (an admin's: all) by position,
    the rest as counts per priority, without their keys' ids."""

    jobs: list[QueueEntry]
    others: list[QueueCount]
    queued: int = Field(description="queued jobs in all")
    truncated: bool = Field(description="more of the caller's jobs are queued than listed")
