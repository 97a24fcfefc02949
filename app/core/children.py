"""The processes `epochal up` runs: each in a session of its own, recorded in a pid file, and
every one of them stopped however `up` is told to stop.

Once a child may exist, a signal only sets StopRequest's flag: it never raises inside `up`,
so the one path that stops (SIGTERM to each child, SIGKILL to each group after the grace, then
whatever was re-parented to `up`) always runs to its end. A second or third Ctrl-C, SIGTERM or
SIGHUP in quick succession changes nothing; nor does the SIGTERM that make forwards to `up`
right after the one its process group got. Before any child exists the first one ends `up`.

`up` is the child subreaper of everything below it (Linux): a warm training process whose Celery
pool process died is re-parented to `up`, not to init, and is stopped with the rest. The pid
file lets the next `up` on the same home find what an `up` killed with SIGKILL left running.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each stops `epochal up`
STOP_GRACE_SECONDS = 20.0  # from SIGTERM to the API and worker until their groups are killed
ADOPTED_GRACE_SECONDS = 3.0  # re-parented processes (told by PR_SET_PDEATHSIG) to exit alone
PR_SET_CHILD_SUBREAPER = 36


class StopRequest:
    """What the stop signals do: end `up` at once while it has no child, else set a flag."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.children_may_exist = False

    def install(self) -> None:
        """Handle every stop signal, SIGINT too: a shell starts `cmd &` with SIGINT ignored."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        if not self.children_may_exist:
            raise KeyboardInterrupt  # nothing started yet: nothing to stop


def become_subreaper() -> None:
    """Orphans below this process come to it, not to init (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields  # a zombie has ended


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks after boot): a pid reused later differs."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


@dataclass(frozen=True)
class Recorded:
    """A process of an `epochal up`, as its pid file names it."""

    role: str  # up, api or worker
    pid: int
    start: int | None

    def alive(self) -> bool:
        ticks = start_ticks(self.pid)
        return ticks is not None and (self.start is None or ticks == self.start)


def recorded(role: str, pid: int) -> Recorded:
    return Recorded(role, pid, start_ticks(pid))


def stale(pids_file: Path) -> list[Recorded]:
    """The processes an earlier `up` on this home recorded that are still running."""
    try:
        entries = json.loads(pids_file.read_text())["processes"]
        found = [Recorded(str(e["role"]), int(e["pid"]), e.get("start")) for e in entries]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [p for p in found if p.pid != os.getpid() and p.alive()]


def stale_message(found: list[Recorded], pids_file: Path) -> str:
    """What to tell the user about them, and how to stop them."""
    named = ", ".join(f"{p.role} (pid {p.pid})" for p in found)
    leaders = [p for p in found if p.role == "up"]
    if leaders:
        how = f"stop it first: Ctrl-C where it runs, or kill -TERM {leaders[0].pid}"
    else:  # each child leads a process group: its pool and training processes go with it
        how = "stop them first: kill -TERM -- " + " ".join(f"-{p.pid}" for p in found)
    return (
        f"epochal up: an earlier `epochal up` on this home still runs ({pids_file}): {named}; {how}"
    )


class Children:
    """The API and the worker of one `up`: started, recorded, waited on, stopped."""

    def __init__(self, pids_file: Path, stop: StopRequest) -> None:
        self.pids_file, self.stop_request = pids_file, stop
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, role: str, argv: list[str], env: Mapping[str, str]) -> bool:
        """Start one child in a session of its own, unless a stop came first."""
        self.stop_request.children_may_exist = True  # from here on, signals only set the flag
        if self.stop_request.requested:
            return False
        self.procs[role] = subprocess.Popen(argv, env=dict(env), start_new_session=True)
        self._record()
        return True

    def _record(self) -> None:
        processes = [recorded("up", os.getpid())]
        processes += [recorded(role, p.pid) for role, p in self.procs.items()]
        self.pids_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.pids_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"processes": [asdict(p) for p in processes]}))
        os.replace(tmp, self.pids_file)

    def wait(self, tick: Callable[[], None] = lambda: None) -> None:
        """Until a stop signal comes or a child ends; `tick` runs between looks."""
        while not self.stop_request.requested and all(
            p.poll() is None for p in self.procs.values()
        ):
            tick()
            time.sleep(0.2)

    def stop_all(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM each (the worker re-queues a running job from its checkpoint), SIGKILL the
        group of any still running after `grace`, then whatever was re-parented to us."""
        self.stop_request.children_may_exist = True
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)  # the leader only: it stops its own
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
            _kill_group(proc.pid)  # a member its leader left behind (a pool process)
        stop_adopted(ADOPTED_GRACE_SECONDS)
        self.pids_file.unlink(missing_ok=True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def adopted() -> list[int]:
    """Live processes whose parent is this one (as subreaper, orphans of its children)."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields and int(fields[1]) == me:
            found.append(int(entry.name))
    return found


def stop_adopted(grace: float) -> None:
    """Reap orphans that exit by themselves within `grace`; SIGKILL the rest, with their
    groups (a training process leads one: its DDP ranks are in it)."""
    deadline = time.monotonic() + grace
    while (left := adopted()) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
    while adopted() and time.monotonic() < deadline + grace:
        _reap()
        time.sleep(0.05)
    _reap()


def _reap() -> None:
    """Collect the exit status of every ended child (adopted ones become zombies until then)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
