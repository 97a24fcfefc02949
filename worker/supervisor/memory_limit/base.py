"""What every kind of per-process memory limit does for the supervisor (worker.supervisor.
memory_limit): take the training child in, watch it while it runs, say whether the limit
ended it and its peak, and leave nothing behind."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from abc import ABC, abstractmethod
from pathlib import Path

# The machine's OOM killer picks the process with the highest score: a training process, never the
# API, the database or the worker, whose scores stay as they were.
OOM_SCORE_ADJ = 1000
PREFIX = "epochal-"  # a job's group is PREFIX + the worker's pid + its job and attempt
EMPTY_WAIT = 5.0  # seconds for the processes left in a group to exit once killed


class MemoryLimit(ABC):
    """One attempt's limit on the memory of its training process and everything it starts."""

    kind: str  # how it is enforced, for the job's error and log: "cgroup v2", "watchdog"

    def __init__(self, limit: int) -> None:
        self.limit = limit

    @abstractmethod
    def add(self, pid: int) -> None:
        """Put the training process (a cold child just started, or a warm one) under it."""

    def poll(self) -> bool:
        """Called while the child runs: True once the limit has ended it (a watchdog's
        kill); a cgroup's limit is the kernel's to enforce."""
        return False

    @abstractmethod
    def tripped(self) -> bool:
        """Whether going over the limit killed a process of the attempt."""

    @abstractmethod
    def peak(self) -> int | None:
        """The most memory the attempt held at once, where known."""

    @abstractmethod
    def close(self) -> None:
        """After the child's exit: end anything it left under the limit, remove the group."""


class CgroupLimit(MemoryLimit):
    """A limit that is a group of its own under `parent`: made before the child starts (groups
    a dead worker left are swept first), the child moved in, the group emptied and removed at
    the end. Each cgroup version writes its own knobs in `configure`.

    The group is charged the page cache its processes read through too (the shards a
    streamed data set is read from), which the kernel takes back before it kills anything:
    its usage, and the kernel's own peak of it, stay near the limit however little the
    process holds. So the peak of a run that ends well is the most of the group's own memory
    (anonymous and shared, what no reclaim can take) seen at the supervisor's looks, as the
    watchdog's is; a run the kernel killed reports the kernel's peak, the figure it held to
    the limit."""

    def __init__(self, parent: Path, name: str, limit: int) -> None:
        super().__init__(limit)
        self.most = 0
        sweep_stale(parent)
        self.folder = parent / name
        self.folder.mkdir()
        try:
            self.configure(limit)
        except BaseException:
            self.folder.rmdir()
            raise

    @abstractmethod
    def configure(self, limit: int) -> None:
        """Write the version's limit knobs into the new group."""

    @abstractmethod
    def held(self) -> int | None:
        """The group's memory now less its page cache (None: unreadable)."""

    @abstractmethod
    def charged_peak(self) -> int | None:
        """The kernel's peak of what the group was charged, page cache included."""

    def poll(self) -> bool:
        self.most = max(self.most, self.held() or 0)
        return False

    def peak(self) -> int | None:
        if self.tripped() or not self.most:
            return self.charged_peak()
        return self.most

    def add(self, pid: int) -> None:
        (self.folder / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        remove_group(self.folder, self.folder / "cgroup.procs")


def set_oom_score(pid: int) -> None:
    """The training process first in line for the machine's OOM killer (its processes inherit
    it)."""
    with contextlib.suppress(OSError):  # gone already: nothing to protect the others from
        Path(f"/proc/{pid}/oom_score_adj").write_text(str(OOM_SCORE_ADJ))


def group_name(job_id: str, attempt: int) -> str:
    return f"{PREFIX}{os.getpid()}-{job_id}-{attempt}"


def pids_in(procs: Path) -> list[int]:
    try:
        return [int(line) for line in procs.read_text().split()]
    except (OSError, ValueError):
        return []


def remove_group(folder: Path, procs: Path) -> None:
    """SIGKILL whatever is left in the group (a DDP rank that outlived its launcher), then
    remove it once empty: a group that still holds a process cannot be removed."""
    deadline = time.monotonic() + EMPTY_WAIT
    while folder.exists():
        for pid in pids_in(procs):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def sweep_stale(parent: Path) -> None:
    """Remove the groups a worker that died (its pid gone) left under `parent`."""
    with contextlib.suppress(OSError):
        for folder in parent.glob(f"{PREFIX}*"):
            pid = folder.name[len(PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only an empty one: its processes are gone with its worker


def field_of(path: Path, name: str) -> int | None:
    """The integer after `name` on its line of a "name value" file, or None."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == name and parts[1].isdigit():
            return int(parts[1])
    return None


def read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
