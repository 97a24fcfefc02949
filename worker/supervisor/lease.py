"""The lease of a running attempt, renewed by a thread of its own.

A database call can hang (a stalled network path, a proxy that stopped forwarding: TCP
keepalives see a live peer, the server never sees the query, so no timeout of its fires). The
supervisor must still stop its child before the lease could expire, because the reaper then
hands the job to another attempt. So the renewals, and their retries with backoff, run here,
and the supervisor's loop only reads when the last one succeeded (RELIABILITY.md §1, §11).

A renewal also carries the child's step progress (worker.protocol): when the progress file
moved, the next renewal comes early, so the job row sees the steps move at most about every
PROGRESS_SECONDS, through the one fenced statement that renews the lease.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.exc import DBAPIError

from app.core.config import Settings
from app.core.db import RETRY_FIRST_DELAY, session_scope, transient
from app.core.log_setup import job_context
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus
from app.schemas.api import StepProgress
from worker.protocol import PROGRESS_SECONDS, read_progress

log = logging.getLogger(__name__)


class LeaseKeeper(threading.Thread):
    """Renews the lease of (job_id, attempt) every heartbeat (sooner when the child's progress
    moved) until stopped or not ours."""

    def __init__(
        self,
        settings: Settings,
        job_id: str,
        attempt: int,
        renewed_at: float,
        files: JobFiles | None = None,  # whose progress file to read (None: not read)
    ) -> None:
        super().__init__(name=f"lease-{job_id}", daemon=True)
        self.settings, self.job_id, self.attempt = settings, job_id, attempt
        self.files = files
        self.reported: StepProgress | None = None  # the progress the job row holds
        self.renewed_at = renewed_at  # monotonic time just before the last successful renewal
        self.status: JobStatus | None = JobStatus.running
        self.taken = False  # the job is another attempt's (or ended): stop at once
        self.preempted = False  # the scheduler asked this attempt to make room (app.scheduler)
        self.broken: str | None = None  # a gang's rank is gone (worker.supervisor.gang_seat)
        self._stopped = threading.Event()

    def run(self) -> None:
        with job_context(self.job_id):  # a thread does not inherit the supervisor's context
            self._keep()

    def _keep(self) -> None:
        delay = RETRY_FIRST_DELAY
        while not self._stopped.is_set():
            started, progress = time.monotonic(), self._new_progress()
            try:
                status = self._renew(progress)
            except Exception as exc:  # whatever it was, the loop's deadline still holds
                expected = isinstance(exc, DBAPIError) and transient(exc)
                log.warning(
                    "job %s: lease renewal failed (%s); retrying in %.1fs",
                    self.job_id,
                    exc,
                    delay,
                    exc_info=not expected,
                )
                self._stopped.wait(delay)  # a blip: try again soon, not a heartbeat later
                delay = min(2 * delay, self.settings.heartbeat_seconds)
                continue
            if status is None:
                self.taken = True
                return
            self.renewed_at, self.status, delay = started, status, RETRY_FIRST_DELAY
            self.reported = progress or self.reported
            self._wait_for_next(time.monotonic() + self.settings.heartbeat_seconds)

    def _wait_for_next(self, due: float) -> None:
        """Until the next renewal is due, or sooner once the child's progress moved (looked at
        every PROGRESS_SECONDS), or until stopped."""
        while not self._stopped.wait(min(PROGRESS_SECONDS, max(0.0, due - time.monotonic()))):
            if time.monotonic() >= due or self._new_progress() is not None:
                return

    def _new_progress(self) -> StepProgress | None:
        """The child's progress when it differs from what the job row holds, else None."""
        if self.files is None:
            return None
        try:
            progress = read_progress(self.files, self.attempt)
        except OSError:  # a disk in trouble must not stop the renewals: no news, then
            return None
        return None if progress == self.reported else progress

    def _renew(self, progress: StepProgress | None) -> JobStatus | None:
        steps = None if progress is None else progress.model_dump()
        with session_scope() as session:
            job = crud.renew_lease(
                session, self.job_id, self.attempt, self.settings.lease_seconds, steps
            )
            if job is None:
                return None
            self.preempted = job.preempted_by is not None
            return JobStatus(job.status)

    def expiring(self, now: float) -> bool:
        """True from one heartbeat before the lease could expire: stop training then, since
        the reaper may hand the job to someone else once it has."""
        settings = self.settings
        return now - self.renewed_at >= settings.lease_seconds - settings.heartbeat_seconds

    def stop(self) -> None:
        """No more renewals (a call in flight finishes on its own; its result is ignored)."""
        self._stopped.set()
