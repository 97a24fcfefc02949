"""A worker's warm shutdown ends: past its bound, the main process exits by itself.

Celery's pool can wait forever for a pool process that died while it started (seen when a
SIGTERM to the worker's group came during the warm-up); the bound is what ends that worker.
"""

from __future__ import annotations

import subprocess
import sys

from app.core.config import Settings
from tests.helpers import ROOT, scaled
from worker.supervisor import shutdown

STUCK = """
import threading
from worker.supervisor import shutdown
shutdown.end_within(0.3)
shutdown.end_within(600)  # a second stop signal: the first bound holds
print("bounded", flush=True)
threading.Event().wait()  # a main thread that never returns, as in billiard's join
"""


def test_a_stuck_shutdown_ends_at_its_bound() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STUCK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert done.returncode == shutdown.STUCK_SHUTDOWN_EXIT, done.stderr
    assert done.stdout.strip() == "bounded"
    assert "warm shutdown still running after 0.3s" in done.stderr


def test_the_bound_leaves_a_running_job_its_whole_stop() -> None:
    settings = Settings(cancel_grace_seconds=7, kill_grace_seconds=3)
    bound = shutdown.shutdown_bound(settings)
    assert bound == 7 + 3 + shutdown.SHUTDOWN_MARGIN_SECONDS
