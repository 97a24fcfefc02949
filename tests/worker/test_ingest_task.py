"""The ingest task: registered on the worker's Celery app, sent to the queue every worker
consumes (a worker without GPUs takes it), and importing the worker's tasks loads no framework."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

PROBE = """
import sys
import worker.tasks
from app.services.queue import INGEST_TASK
from worker.celery_app import celery_app
assert INGEST_TASK in celery_app.tasks, sorted(celery_app.tasks)
loaded = [m for m in ("torch", "tensorflow", "keras") if m in sys.modules]
assert not loaded, loaded
"""


def test_the_task_is_registered_and_imports_no_framework() -> None:
    run = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr


def test_it_goes_to_the_queue_of_a_worker_without_gpus() -> None:
    from app.cli import worker_argv
    from app.services.queue import queue_for_gpus

    queues = worker_argv(0, None)[worker_argv(0, None).index("-Q") + 1].split(",")
    assert queue_for_gpus(0) in queues
