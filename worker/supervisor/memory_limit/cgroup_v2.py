"""A job's memory limit as a cgroup v2 group: <the worker's own group>/epochal-…, with
memory.max, memory.swap.max 0 and memory.oom.group (an OOM kill ends every process of the
attempt at once, not one DDP rank). memory.events counts the kills, memory.peak is the peak
of the charge, page cache included (memory.stat's anon and shmem are the group's own memory,
base.CgroupLimit).

The job's group goes under the worker's own group, or under that group's parent where the
worker runs in a leaf of its delegated group (systemd's Delegate= with DelegateSubgroup=):
v2 lets a group with processes of its own hand the memory controller to children only at
the root ("no internal processes"). Where neither will (cgroup.subtree_control cannot get
memory, or is not this process's to write), the worker uses the watchdog."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from worker.supervisor.memory_limit.base import CgroupLimit, field_of, read_int

ROOT = Path("/sys/fs/cgroup")


def parent_group(root: Path = ROOT, membership: Path = Path("/proc/self/cgroup")) -> Path | None:
    """This process's own group where it delegates memory to groups under it (None: not a
    v2 hierarchy with the memory controller, or one this process cannot use)."""
    try:
        if "memory" not in (root / "cgroup.controllers").read_text().split():
            return None
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    if own is None:
        return None
    folder = root / own.lstrip("/")
    folder = folder if folder.is_dir() else root  # a namespaced view shows its own as the root
    for candidate in (folder, folder.parent) if folder != root else (folder,):
        if _delegates_memory(candidate):
            return candidate
    return None


def _delegates_memory(folder: Path) -> bool:
    """Whether groups made under `folder` get the memory controller (enabled here if not)."""
    if not os.access(folder, os.W_OK):
        return False
    control = folder / "cgroup.subtree_control"
    try:
        if "memory" not in control.read_text().split():
            control.write_text("+memory")  # refused while the group has processes of its own
    except OSError:
        return False
    return True


class CgroupV2(CgroupLimit):
    kind = "cgroup v2"

    def configure(self, limit: int) -> None:
        (self.folder / "memory.max").write_text(str(limit))
        (self.folder / "memory.oom.group").write_text("1")
        with contextlib.suppress(OSError):  # a kernel without swap accounting
            (self.folder / "memory.swap.max").write_text("0")

    def tripped(self) -> bool:
        return (field_of(self.folder / "memory.events", "oom_kill") or 0) > 0

    def held(self) -> int | None:
        stat = self.folder / "memory.stat"
        anon = field_of(stat, "anon")
        return None if anon is None else anon + (field_of(stat, "shmem") or 0)

    def charged_peak(self) -> int | None:
        return read_int(self.folder / "memory.peak")  # Linux 5.19 and later

    def close(self) -> None:
        with contextlib.suppress(OSError):  # Linux 5.14 and later; else killed one by one
            (self.folder / "cgroup.kill").write_text("1")
        super().close()
