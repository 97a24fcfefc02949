"""A warm training child imports its framework at idle CPU priority, and trains at normal one.

The next warm child starts when a job's child starts if the job leaves a CPU free
(worker.supervisor.standby, threads.spare_cpu), so its ~5 s of imports run beside the job's
first epochs. On a CPU machine the job's PyTorch (OpenMP) threads
then share the cores with it, and a thread that loses its core stalls the others at every
step. Under SCHED_IDLE the import only takes CPU nothing else wants, so the job's threads keep
their cores while they have work (figures: docs/benchmarks.md, "The worker"). Going back from
SCHED_IDLE to normal priority needs CAP_SYS_NICE or an RLIMIT_NICE of 20 (a container:
`ulimits: nice: 20`, docker-compose.yml); without either, the warm child imports at normal
priority.
"""

from __future__ import annotations

import logging
import os
import resource
from pathlib import Path

log = logging.getLogger("epochal.child")
CAP_SYS_NICE = 23  # its bit in /proc/self/status CapEff (linux/capability.h)
NICE_RLIMIT_FOR_NORMAL = 20  # RLIMIT_NICE allows nice values down to 20 - limit: 0 here


def may_leave_idle() -> bool:
    """Whether this process may move its threads from SCHED_IDLE back to SCHED_OTHER."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    if soft == resource.RLIM_INFINITY or soft >= NICE_RLIMIT_FOR_NORMAL:
        return True
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    caps = next((line.split()[1] for line in status.splitlines() if line.startswith("CapEff")), "0")
    return bool(int(caps, 16) >> CAP_SYS_NICE & 1)


def idle_while_waiting() -> bool:
    """Put every thread of this process at SCHED_IDLE (numpy's OpenBLAS pool is up already;
    threads started later inherit it) if it can come back from it; True when it did."""
    if not hasattr(os, "SCHED_IDLE") or not may_leave_idle():
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:  # a kernel or sandbox that refuses it: import at normal priority
        log.debug("could not lower the warm child's priority: %s", exc)
        return False
    set_policy(os.getpid(), os.SCHED_IDLE)
    return True


def back_to_normal(pid: int | None = None) -> None:
    """Every thread of a process (this one by default) back at SCHED_OTHER. The supervisor
    calls it on the child it hands a job to, so the job need not wait for its idle child to
    be scheduled on a busy machine."""
    set_policy(pid or os.getpid(), os.SCHED_OTHER)


def set_policy(pid: int, policy: int) -> None:
    """The scheduling policy of each thread of a process (Linux keeps one per thread)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:  # the process is gone
        return
    for task in tasks:
        try:
            os.sched_setscheduler(int(task), policy, os.sched_param(0))
        except ProcessLookupError:  # that thread ended meanwhile
            continue
        except OSError as exc:  # not expected after may_leave_idle(): go on, and say so
            log.warning("thread %s of %s kept its CPU priority: %s", task, pid, exc)
