"""The supervisor's side of an attempt's memory limit: the child put under it as it starts,
the watchdog's look at each turn of the supervision loop, the group removed after the exit."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from pathlib import Path

from app.core.config import Settings
from app.domain.job_log import append_line
from worker.supervisor import memory_limit
from worker.supervisor.attempt import Attempt, note
from worker.supervisor.memory_limit.base import MemoryLimit

log = logging.getLogger(__name__)
MIB = 2**20


def under(
    settings: Settings,
    job_id: str,
    attempt: int,
    memory: int | None,
    process: subprocess.Popen[bytes],
    log_path: Path,
) -> tuple[MemoryLimit, str] | None:
    """The child under its memory limit, with a line in its log that says which."""
    try:
        limited = memory_limit.start(settings, job_id, attempt, memory, process.pid)
    except BaseException:  # never leave a child training without a supervisor
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        raise
    if limited is not None:
        enforced, source = limited
        mib = enforced.limit // MIB
        append_line(log_path, f"memory limit {mib} MiB ({source}), enforced by {enforced.kind}")
    return limited


def check(attempt: Attempt) -> None:
    """The watchdog's look at the child's memory (a cgroup's limit is the kernel's to keep)."""
    if attempt.limit is None or attempt.limit_noted:
        return
    enforced, _ = attempt.limit
    if enforced.poll():
        attempt.limit_noted = True
        note(attempt, f"over its memory limit of {enforced.limit // MIB} MiB: sent SIGKILL")


def close(attempt: Attempt) -> None:
    """After the child's exit: whatever it left in its memory group killed, the group removed."""
    if attempt.limit is None:
        return
    enforced, _ = attempt.limit
    peak = enforced.peak()
    if peak is not None:  # what the estimate can be checked against
        log.info(
            "job %s attempt %s: memory peak %d MiB of its %d MiB limit (%s)",
            attempt.job_id,
            attempt.number,
            peak // MIB,
            enforced.limit // MIB,
            enforced.kind,
        )
    try:
        enforced.close()
    except OSError:  # a process that would not die: the next attempt's start removes the group
        log.warning("could not remove job %s's memory group", attempt.job_id, exc_info=True)
