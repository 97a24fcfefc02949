"""Finding the service's processes from a test: training children and their supervisors."""

from __future__ import annotations

import json
from collections.abc import Collection
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
    return [
        pid
        for pid in _pids()
        if CHILD_MODULE in (line := cmdline(pid)) and job_id in line and alive(pid)
    ]


def training_processes_of(home: Path) -> list[int]:
    """Live training children (warm or assigned) of the service whose EPOCHAL_HOME is home."""
    homes = _home_entries(home)
    return [
        pid
        for pid in _pids()
        if CHILD_MODULE in cmdline(pid) and _environ(pid) & homes and alive(pid)
    ]


def processes_of(home: Path, sessions: Collection[int] = ()) -> dict[int, str]:
    """Every live process whose environment says EPOCHAL_HOME=home, or in one of `sessions`,
    with its command line: what a service on that home started, wherever it was re-parented.
    Celery's process title overwrites its environment: its worker and pool are found by session."""
    homes = _home_entries(home)
    return {
        pid: cmdline(pid)
        for pid in _pids()
        if (_environ(pid) & homes or _session(pid) in sessions) and alive(pid)
    }


def sessions_of(home: Path) -> set[int]:
    """The sessions the `up` on `home` recorded (it and each child it started lead one)."""
    try:
        entries = json.loads((home / "up.pids.json").read_text())["processes"]
        return {int(entry["pid"]) for entry in entries}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _session(pid: int) -> int | None:
    stat = _read(Path(f"/proc/{pid}/stat"))
    return int(stat.rsplit(")", 1)[1].split()[3]) if stat else None


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
