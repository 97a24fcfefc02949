"""Finding the service's processes from a test: training children and their supervisors."""

from __future__ import annotations

import os
from pathlib import Path

from worker.protocol import CHILD_MODULE


def _read(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running or stopped; a zombie (dead, not yet reaped) counts as gone."""
    stat = _read(Path(f"/proc/{pid}/stat"))
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] != "Z"


def cmdline(pid: int) -> str:
    return _read(Path(f"/proc/{pid}/cmdline"))


def parent_of(pid: int) -> int:
    return int(_read(Path(f"/proc/{pid}/stat")).rsplit(")", 1)[1].split()[1])


def training_children(job_id: str) -> list[int]:
    """Live `python -m worker.child.launch JOB_ID …` processes (every DDP rank too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            cmdline = _read(entry / "cmdline")
            if CHILD_MODULE in cmdline and job_id in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def training_processes_of(home: Path) -> list[int]:
    """Live training children (warm or assigned) of the service whose EPOCHAL_HOME is home."""
    homes = _home_entries(home)
    return [
        pid
        for pid in _pids()
        if CHILD_MODULE in cmdline(pid) and _environ(pid) & homes and alive(pid)
    ]


def processes_of(home: Path) -> dict[int, str]:
    """Every live process (API, Celery, training) of the service on that home, with its command
    line, wherever it was re-parented: its environment says EPOCHAL_HOME=home, or it holds a
    file under home open, or it is in the process group of one that does. Celery's process
    title overwrites its environment, so the worker is known by the database it holds open
    and its pool process by the worker's group."""
    homes = _home_entries(home)
    ours = {os.getpid(), *[pid for pid in _pids() if _pgid(pid) == os.getpgid(0)]}
    found, groups = set(), set()
    for pid in set(_pids()) - ours:  # this test's process may hold the database open too
        if _environ(pid) & homes or _holds_open(pid, home.resolve()):
            found.add(pid)
            groups.add(_pgid(pid))
    found |= {pid for pid in _pids() if _pgid(pid) in groups - {None}} - ours
    return {pid: cmdline(pid) for pid in found if alive(pid)}


def _home_entries(home: Path) -> set[bytes]:
    """The environment entries that name this home, as given or resolved."""
    return {f"EPOCHAL_HOME={home}".encode(), f"EPOCHAL_HOME={home.resolve()}".encode()}


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _environ(pid: int) -> set[bytes]:
    try:
        return set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    except OSError:
        return set()


def _holds_open(pid: int, folder: Path) -> bool:
    try:
        links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:  # gone, or not ours to read
        return False
    return any(link.startswith(f"{folder}/") for link in links)


def _pgid(pid: int) -> int | None:
    stat = _read(Path(f"/proc/{pid}/stat"))
    return int(stat.rsplit(")", 1)[1].split()[2]) if stat else None
