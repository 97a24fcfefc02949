"""A worker shutting down stops its running job at a step boundary and re-queues it.

Celery's warm shutdown (SIGTERM to the worker: `docker stop`, systemd, `epochal up` stopping)
waits for the running task, which here is the rest of a training job, and a killed worker
leaves its job to the lease reaper. Instead, as soon as the worker's main process starts
shutting down it sends SHUTDOWN_SIGNAL to its pool processes; a supervisor that got it asks its
training child to stop (stop reason `shutdown`). The child keeps the finished epochs, writes a
checkpoint and exits within seconds; the supervisor re-queues the job, and the next worker
resumes it from that checkpoint under the same id. A worker shutting down still receives
messages until its last task ends: it declines them, and the maintenance thread of whichever
process runs next (another worker, the API, the next `epochal up`) sends the job again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable

from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import session_scope
from app.domain import crud, publish_reservation
from app.domain.states import ErrorCode, JobStatus, RequeueCause
from app.domain.tables import Job
from worker.protocol import Outcome

SHUTDOWN_SIGNAL = signal.SIGUSR2  # main process -> pool process; Celery uses neither USR2 there
# After the child's grace and SIGKILL, the supervisor's re-queue (one transaction) and the pool's
# join need seconds, not more.
SHUTDOWN_MARGIN_SECONDS = 10.0
STUCK_SHUTDOWN_EXIT = 70  # EX_SOFTWARE: the main process ended itself, its shutdown stuck
_requested = threading.Event()
_bounded = threading.Event()
logger = logging.getLogger(__name__)


def listen() -> None:
    """In a pool process, before each job: from now on remember a shutdown (requested).

    Not at the pool process's start: billiard sets its own exit handler on SHUTDOWN_SIGNAL
    after Celery's process initializer, and that is right while no job runs.
    """
    signal.signal(SHUTDOWN_SIGNAL, lambda _signum, _frame: _requested.set())


def requested() -> bool:
    """Whether this pool process's worker is shutting down."""
    return _requested.is_set()


def notify(pool_pids: Iterable[int]) -> None:
    """In the worker's main process: tell each pool process that the worker is stopping."""
    for pid in pool_pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, SHUTDOWN_SIGNAL)


def shutdown_bound(settings: Settings) -> float:
    """Seconds a worker's warm shutdown may take: a running job's stop, then the margin."""
    return settings.cancel_grace_seconds + settings.kill_grace_seconds + SHUTDOWN_MARGIN_SECONDS


def end_within(seconds: float) -> None:
    """In the worker's main process: end it after `seconds` if its shutdown has not by then.

    A pool process that dies while it starts (a SIGTERM to the worker's whole group during its
    warm-up) can leave billiard's task handler blocked on a queue lock that process held, and
    the main process then waits for that handler forever. A second stop signal changes nothing.
    """
    if _bounded.is_set():
        return
    _bounded.set()

    def _end() -> None:
        time.sleep(seconds)
        logger.error("warm shutdown still running after %gs: the worker exits", seconds)
        sys.stderr.flush()
        os._exit(STUCK_SHUTDOWN_EXIT)

    threading.Thread(target=_end, name="shutdown-bound", daemon=True).start()


def requeue(session: Session, job: Job, outcome: Outcome) -> bool:
    """Re-queue a running job its shutting-down worker stopped; False if it is not one."""
    if outcome.error_code != ErrorCode.worker_shutdown:
        return False
    # False: cancelling (it ends cancelled), or not ours
    if not crud.requeue(session, job, RequeueCause.shutdown, outcome.error):
        return False
    session.commit()  # not sent: this worker would receive it; maintenance sends it (above)
    return True


def declined(job_id: str) -> bool:
    """Before a job: True (and the job left queued, to be sent again) if shutting down."""
    listen()
    if not requested():
        return False
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        if job is not None and job.status == JobStatus.queued:
            # the next maintenance round publishes it at once
            publish_reservation.release_publish(session, job)
    return True
