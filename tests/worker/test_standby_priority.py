"""A warm training child imports at idle CPU priority and is back at normal priority, every
thread of it, the moment the supervisor hands it a job (worker.cpu_priority)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from tests.helpers import ROOT, wait_until
from worker.cpu_priority import may_leave_idle
from worker.protocol import child_env
from worker.supervisor.standby import StandbyPool

pytestmark = pytest.mark.skipif(
    not may_leave_idle(), reason="needs CAP_SYS_NICE or RLIMIT_NICE 20 (root has it here)"
)


def policies(pid: int) -> set[int]:
    """The scheduling policy of each thread of the process."""
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            found.add(os.sched_getscheduler(int(task)))
        except ProcessLookupError:
            continue
    return found


def test_the_warm_child_imports_idle_and_trains_at_normal_priority(
    sqlite_env: dict[str, str],
) -> None:
    pool = StandbyPool()
    pool.refill("pytorch", child_env())  # sqlite_env is in os.environ
    child, report = pool._waiting["pytorch"]
    try:
        # While it imports PyTorch (a few seconds), its thread(s) wait at SCHED_IDLE.
        wait_until(lambda: policies(child.pid) == {os.SCHED_IDLE}, 30, "the child at idle")
        assert pool.assign("pytorch", "no-such-job", 1) == (child, report)
        assert policies(child.pid) == {os.SCHED_OTHER}  # at once, not when it next runs
    finally:
        child.kill()
        child.wait()
        os.close(report)
        pool.close()


def test_without_the_right_to_come_back_it_never_goes_idle() -> None:
    """RLIMIT_NICE 0 and no CAP_SYS_NICE: a process at SCHED_IDLE could never train at normal
    priority again, so it stays where it is."""
    code = (
        "import os\n"
        "from worker.cpu_priority import idle_while_waiting, may_leave_idle\n"
        "print(may_leave_idle(), idle_while_waiting(), os.sched_getscheduler(0))\n"
    )
    # As an unprivileged user: setpriv drops every capability, preexec_fn sets RLIMIT_NICE 0.
    argv = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-c", code]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NICE, (0, 0)),
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", str(os.SCHED_OTHER)]


def test_back_to_normal_raises_every_thread_of_this_process() -> None:
    code = (
        "import os, threading\n"
        "from worker.cpu_priority import back_to_normal, idle_while_waiting\n"
        "assert idle_while_waiting()\n"
        "ready, done = threading.Event(), threading.Event()\n"
        "t = threading.Thread(target=lambda: (ready.set(), done.wait())); t.start(); ready.wait()\n"
        "back_to_normal()\n"
        "print(sorted({os.sched_getscheduler(int(x)) for x in os.listdir('/proc/self/task')}))\n"
        "done.set()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"[{os.SCHED_OTHER}]"  # the thread started at idle came back
