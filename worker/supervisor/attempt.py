"""One running attempt as the supervisor sees it: its child, its stop and kill times, and the
two things every part of the supervisor does to it (a line in the job log, a signal)."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from app.domain.job_files import JobFiles
from app.domain.job_log import append_line
from app.domain.states import StopReason
from worker.supervisor import gang
from worker.supervisor.log_shipper import LogShipper
from worker.supervisor.oom import MemoryWatch

log = logging.getLogger(__name__)


@dataclass
class Attempt:
    job_id: str
    attempt: int
    workdir: Path
    deadline: float
    process: subprocess.Popen[bytes]
    renewed_at: float  # monotonic time just before the last successful lease renewal
    stop_sent_at: float | None = None
    stop_reason: StopReason | None = None
    terminated_at: float | None = None
    killed_at: float | None = None
    lost: bool = False
    memory: MemoryWatch = field(default_factory=MemoryWatch)  # for an OOM verdict at the end
    formed: gang.Formed | None = None  # this worker's node of a multi-node job's gang
    broken: str | None = None  # rank 0: why the gang could not go on (a member lost)
    shipper: LogShipper | None = None  # another node: its log's lines, to the database

    @property
    def files(self) -> JobFiles:
        """The job's files as this node sees them: its own spec, log and attempt files."""
        return JobFiles(self.workdir, gang.member_of(self.formed))

    @property
    def log(self) -> Path:
        """The log this node writes (JobFiles.member_log): never another node's file."""
        return self.files.log


def wait_exit(process: subprocess.Popen[bytes], seconds: float) -> None:
    """Return when the child exits or `seconds` have passed. Popen.wait(timeout) polls instead,
    waking every few milliseconds: each wake takes a core from the job's training threads, and
    its exit is seen up to 50 ms late. A pidfd wakes once, at the exit."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError:  # reaped already, or a kernel without pidfds (before Linux 5.3)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=seconds)
        return
    try:
        select.select([pidfd], [], [], seconds)
    finally:
        os.close(pidfd)


def note(run: Attempt, text: str) -> None:
    """A line in the worker's log and in this node's job log."""
    log.info("job %s attempt %s: %s", run.job_id, run.attempt, text)
    try:
        append_line(run.log, text)
    except OSError:
        log.warning("could not write job %s's log", run.job_id, exc_info=True)


def signal_group(run: Attempt, signum: int) -> None:
    """Signal the child's whole process group (every DDP rank too)."""
    try:
        os.killpg(run.process.pid, signum)
    except ProcessLookupError:
        pass
