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
import os
import subprocess
import threading
import time

from app.core.config import Settings
from worker.cpu_priority import back_to_normal
from worker.protocol import Assignment, Threads, child_env, spawn_child, standby_argv

log = logging.getLogger(__name__)


class StandbyPool:
    """At most one waiting child per framework, owned by this (Celery pool) process."""

    def __init__(self) -> None:
        # Each waiting child with its report pipe's read end (worker.protocol.spawn_child).
        self._waiting: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        # The first warm-up may come from a thread (worker.calibration) while a job is assigned.
        self._lock = threading.Lock()

    def refill(self, framework: str, env: dict[str, str], python: str | None = None) -> None:
        """Start a waiting child for the framework unless a live one is there already."""
        with self._lock:
            self._refill(framework, env, python)

    def _refill(self, framework: str, env: dict[str, str], python: str | None) -> None:
        current = self._waiting.get(framework)
        if current is not None and current[0].poll() is None:
            return
        if current is not None:
            os.close(current[1])
        self._waiting[framework] = spawn_child(
            standby_argv(framework, python),
            env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # the child moves its output to the job's log on assignment
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # like a cold child: its own group, signalled as one
        )

    def assign(
        self, framework: str, job_id: str, attempt: int, threads: Threads | None = None
    ) -> tuple[subprocess.Popen[bytes], int] | None:
        """Hand the job to the waiting child: it and its report pipe's read end; None when
        there is none (start a cold one)."""
        with self._lock:
            waiting = self._waiting.pop(framework, None)
        if waiting is None:
            return None
        child, report = waiting
        try:
            if child.poll() is not None or child.stdin is None:
                raise OSError(f"the warm {framework} child has exited")
            child.stdin.write(Assignment(job_id, attempt, time.time(), threads).encode())
            child.stdin.close()
        except OSError:  # it died before or during the write: start a cold child instead
            log.warning("warm %s child was gone; starting a cold one", framework)
            child.kill()
            os.close(report)
            return None
        back_to_normal(child.pid)  # it imported at idle priority (worker.cpu_priority)
        return child, report

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        for child, report in self._waiting.values():
            child.kill()
            os.close(report)
        self._waiting.clear()


POOL = StandbyPool()


def warm_up(settings: Settings, frameworks: list[str]) -> None:
    """Start the next training process of each framework now (worker.supervisor.standby)."""
    wanted = [f.strip() for f in settings.warm_frameworks.split(",") if f.strip()]
    for framework in frameworks:
        if framework in wanted:
            POOL.refill(framework, child_env(), settings.python_for(framework))
