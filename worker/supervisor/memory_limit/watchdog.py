"""A job's memory limit where the worker may make no cgroup: the supervisor sums the resident
memory of the training process and its descendants (DDP ranks) at each look (about five a
second) and SIGKILLs the process group once it is over. An address-space limit (RLIMIT_AS)
would be exact, but the frameworks reserve far more address space than they touch (allocator
arenas, thread stacks, TensorFlow's and CUDA's reservations), so it would fail jobs that fit.
An allocation that outruns a look can still reach the machine's OOM killer, which then picks the
training process first (base.OOM_SCORE_ADJ)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from worker.supervisor.memory_limit.base import MemoryLimit, field_of

KIB = 1024


def descendants(pid: int) -> list[int]:
    """`pid` and every process under it, from each task's children list."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                with contextlib.suppress(OSError):
                    queue.extend(int(n) for n in (task / "children").read_text().split())
    return found


def resident(pids: list[int]) -> int:
    return sum((field_of(Path(f"/proc/{p}/status"), "VmRSS:") or 0) * KIB for p in pids)


class Watchdog(MemoryLimit):
    kind = "watchdog"

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.pid: int | None = None
        self.most = 0
        self.killed = False

    def add(self, pid: int) -> None:
        self.pid = pid  # the leader of its own process group (a new session)

    def poll(self) -> bool:
        if self.pid is None or self.killed:
            return self.killed
        now = resident(descendants(self.pid))
        self.most = max(self.most, now)
        if now > self.limit:
            self.killed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        return self.killed

    def tripped(self) -> bool:
        return self.killed

    def peak(self) -> int | None:
        return self.most or None

    def close(self) -> None:
        self.pid = None  # the supervisor reaped its group: nothing is left to watch
