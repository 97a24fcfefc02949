"""Warm training children: one process per framework, started ahead of the next job.

A new training process per attempt keeps every guarantee of the process model (GPU memory,
TensorFlow strategies and CUDA state die with it, P12-P16), but importing the framework costs
~1 s for PyTorch and ~3 s for TensorFlow before the first step. So when a job's child starts
(and when the pool process starts) the supervisor starts the *next* child at once: it imports
its framework while the job trains and waits on stdin for one assignment, so a job that comes
right after another ends (a sweep's next trial) does not wait for the import either. Where the
job trains on every CPU, the next child starts when the job ends instead
(worker.supervisor.threads.spare_cpu). Each job still gets a fresh process of its own.
Set EPOCHAL_WARM_FRAMEWORKS="" to turn this off.
"""

from __future__ import annotations

import logging
import subprocess
import time

from app.core.config import Settings
from worker.priority import back_to_normal
from worker.protocol import Assignment, Threads, child_env, standby_argv

log = logging.getLogger(__name__)


class StandbyPool:
    """At most one waiting child per framework, owned by this (Celery pool) process."""

    def __init__(self) -> None:
        self._waiting: dict[str, subprocess.Popen[bytes]] = {}

    def refill(self, framework: str, env: dict[str, str], python: str | None = None) -> None:
        """Start a waiting child for the framework unless a live one is there already."""
        current = self._waiting.get(framework)
        if current is not None and current.poll() is None:
            return
        self._waiting[framework] = subprocess.Popen(
            standby_argv(framework, python),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # the child moves its output to the job's log on assignment
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # like a cold child: its own group, signalled as one
            env=env,
        )

    def assign(
        self, framework: str, job_id: str, attempt: int, threads: Threads | None = None
    ) -> subprocess.Popen[bytes] | None:
        """Hand the job to the waiting child; None when there is none (start a cold one)."""
        child = self._waiting.pop(framework, None)
        if child is None or child.poll() is not None or child.stdin is None:
            return None
        try:
            child.stdin.write(Assignment(job_id, attempt, time.time(), threads).encode())
            child.stdin.close()
        except OSError:  # it died between poll() and write(): start a cold child instead
            log.warning("warm %s child was gone; starting a cold one", framework)
            child.kill()
            return None
        back_to_normal(child.pid)  # it imported at idle priority (worker.priority)
        return child

    def close(self) -> None:
        for child in self._waiting.values():
            child.kill()
        self._waiting.clear()


POOL = StandbyPool()


def warm_up(settings: Settings, frameworks: list[str]) -> None:
    """Start the next training process of each framework now (worker.supervisor.standby)."""
    wanted = [f.strip() for f in settings.warm_frameworks.split(",") if f.strip()]
    for framework in frameworks:
        if framework in wanted:
            POOL.refill(framework, child_env(), settings.python_for(framework))
