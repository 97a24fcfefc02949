"""A job's memory limit as a cgroup v1 memory group: <the worker's own group>/epochal-…, with
memory.limit_in_bytes (and memsw, so swap is no way around it). The kernel's OOM killer
ends a process of the group that goes over; memory.oom_control counts it, and
memory.max_usage_in_bytes is the peak of the charge, page cache included (memory.stat's
total_rss and total_shmem are the group's own memory, base.CgroupLimit). Memory the process
held before it joined (a warm child's framework import) stays charged to the worker's group."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from worker.supervisor.memory_limit.base import CgroupLimit, field_of, read_int

ROOT = Path("/sys/fs/cgroup/memory")


def parent_group(root: Path = ROOT, membership: Path = Path("/proc/self/cgroup")) -> Path | None:
    """This process's own memory group, where a group of its own may go (None: no v1 memory
    hierarchy, or one this process cannot write)."""
    if not (root / "memory.limit_in_bytes").exists():
        return None
    try:
        lines = [line.split(":", 2) for line in membership.read_text().splitlines()]
    except OSError:
        return None
    for parts in (p for p in lines if len(p) == 3):
        if "memory" in parts[1].split(","):
            folder = root / parts[2].lstrip("/")
            # A namespaced view shows its own group as the root.
            folder = folder if folder.is_dir() else root
            return folder if os.access(folder, os.W_OK) else None
    return None


class CgroupV1(CgroupLimit):
    kind = "cgroup v1"

    def configure(self, limit: int) -> None:
        (self.folder / "memory.limit_in_bytes").write_text(str(limit))
        for knob, value in (("memory.memsw.limit_in_bytes", limit), ("memory.swappiness", 0)):
            with contextlib.suppress(OSError):  # no swap accounting in this kernel
                (self.folder / knob).write_text(str(value))

    def tripped(self) -> bool:
        return (field_of(self.folder / "memory.oom_control", "oom_kill") or 0) > 0

    def held(self) -> int | None:
        stat = self.folder / "memory.stat"
        rss = field_of(stat, "total_rss")
        return None if rss is None else rss + (field_of(stat, "total_shmem") or 0)

    def charged_peak(self) -> int | None:
        return read_int(self.folder / "memory.max_usage_in_bytes")
