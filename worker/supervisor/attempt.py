"""One running attempt as the supervisor sees it: its child, its stop and kill times, and what
every part of the supervisor does to it (a line in the job log, a signal, waiting for it)."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from app.domain.job_files import JobFiles
from app.domain.job_log import append_line
from app.domain.states import StopReason
from worker.protocol import REPORTED
from worker.supervisor import gang_seat
from worker.supervisor.log_shipper import LogShipper
from worker.supervisor.memory_limit import MemoryLimit
from worker.supervisor.oom import MemoryWatch

log = logging.getLogger(__name__)


@dataclass
class Attempt:
    job_id: str
    number: int  # the job's attempt counter this try runs under
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
    formed: gang_seat.Formed | None = None  # this worker's node of a multi-node job's gang
    broken: str | None = None  # rank 0: why the gang could not go on (a rank lost)
    shipper: LogShipper | None = None  # another node: its log's lines, to the database
    report: int | None = None  # the child's report pipe (worker.protocol.spawn_child), unread
    reported: bool = False  # its outcome file is whole; its process may still be exiting
    # Its memory limit and where the figure comes from (worker.supervisor.memory_limit).
    limit: tuple[MemoryLimit, str] | None = None
    limit_noted: bool = False  # the watchdog killed it; said in the log once

    @property
    def files(self) -> JobFiles:
        """The job's files as this node sees them: its own spec, log and attempt files."""
        return JobFiles(self.workdir, gang_seat.rank_of(self.formed))

    @property
    def log(self) -> Path:
        """The log this node writes (JobFiles.rank_log): never another node's file."""
        return self.files.log


def wait_end(attempt: Attempt, seconds: float) -> None:
    """Return when the child exits, reports its end (attempt.reported), or `seconds` have passed.
    Popen.wait(timeout) polls instead, waking every few milliseconds: each wake takes a core
    from the job's training threads, and its exit is seen up to 50 ms late. A pidfd wakes
    once, at the exit; the report pipe once, when the outcome is whole (before the exit)."""
    try:
        pidfd = os.pidfd_open(attempt.process.pid)
    except OSError:  # reaped already, or a kernel without pidfds (before Linux 5.3)
        with contextlib.suppress(subprocess.TimeoutExpired):
            attempt.process.wait(timeout=seconds)
        return
    try:
        watched = [pidfd] if attempt.report is None else [pidfd, attempt.report]
        readable, _, _ = select.select(watched, [], [], seconds)
    finally:
        os.close(pidfd)
    if attempt.report is not None and attempt.report in readable:
        # One byte when the outcome is whole; none (the pipe's end) when the child exited
        # without a word, or a DDP launcher whose rank 0 wrote the outcome: its exit tells.
        attempt.reported = os.read(attempt.report, 1) == REPORTED
        close_report(attempt)


def close_report(attempt: Attempt) -> None:
    if attempt.report is not None:
        os.close(attempt.report)
        attempt.report = None


def note(attempt: Attempt, text: str) -> None:
    """A line in the worker's log and in this node's job log."""
    log.info("job %s attempt %s: %s", attempt.job_id, attempt.number, text)
    try:
        append_line(attempt.log, text)
    except OSError:
        log.warning("could not write job %s's log", attempt.job_id, exc_info=True)


def signal_group(attempt: Attempt, signum: int) -> None:
    """Signal the child's whole process group (every DDP rank too)."""
    try:
        os.killpg(attempt.process.pid, signum)
    except ProcessLookupError:
        pass


def reap(attempt: Attempt, grace: float) -> None:
    """Wait for the child's exit: the worker's slot is free only then. One that reported its
    end (and is still exiting) has `grace` seconds for its teardown, then is killed."""
    close_report(attempt)
    if attempt.process.poll() is None:
        wait_end(attempt, grace)
    if attempt.process.poll() is None:
        signal_group(attempt, signal.SIGKILL)
        note(attempt, f"still exiting {grace:g}s after its end: sent SIGKILL")
    attempt.process.wait()
