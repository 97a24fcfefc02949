"""Supervises one job attempt: claim, start the training child, watch it, record the end.

The Celery task calls run_job and nothing else. The child is a separate process in its own
session: this process keeps the job's lease alive, turns a cancel or a deadline into a stop
signal, escalates to SIGTERM and SIGKILL when the child does not stop, and writes the final
status from the child's outcome file (or from how it died).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from app import crud
from app.config import Settings, get_settings
from app.db import session_scope
from app.dispatch import dispatch
from app.models import JobStatus
from worker.outcome import Outcome, read_outcome
from worker.workers import set_current_job

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2
STOP_SIGNAL = signal.SIGUSR1  # worker.launch listens for it


@dataclass
class Attempt:
    job_id: str
    attempt: int
    workdir: Path
    deadline: float
    process: subprocess.Popen[bytes]
    stop_sent_at: float | None = None
    stop_reason: str | None = None
    terminated_at: float | None = None
    lost: bool = False


def run_job(job_id: str, worker_name: str) -> None:
    """Claim the job (a duplicate delivery finds it taken and returns) and run one attempt."""
    settings = get_settings()
    with session_scope() as session:
        job = crud.claim_job(session, job_id, worker_name, settings.lease_seconds)
        if job is None:
            log.info(
                "job %s is not queued (taken, cancelled or ended): ignoring the message", job_id
            )
            return
        attempt, spec = job.attempt, job.spec
    set_current_job(worker_name, job_id)
    try:
        run = start_child(settings, job_id, attempt, spec)
        supervise(settings, run)
        record_end(settings, run)
    finally:
        set_current_job(worker_name, None)


def start_child(settings: Settings, job_id: str, attempt: int, spec: dict[str, object]) -> Attempt:
    workdir = settings.job_dir(job_id)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "spec.json").write_text(json.dumps(spec))
    log_file = open(workdir / "job.log", "ab")  # noqa: SIM115 (the child owns it)
    log_file.write(f"--- attempt {attempt} ---\n".encode())
    log_file.flush()
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "worker.launch", job_id, "--attempt", str(attempt)],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    log_file.close()
    runtime = float(spec["max_runtime_seconds"])  # type: ignore[arg-type]
    return Attempt(job_id, attempt, workdir, time.monotonic() + runtime, process)


def supervise(settings: Settings, run: Attempt) -> None:
    """Until the child exits: renew the lease, relay cancel and deadline, escalate stops."""
    next_beat = 0.0
    while run.process.poll() is None:
        now = time.monotonic()
        if now >= next_beat:
            next_beat = now + settings.heartbeat_seconds
            status = _heartbeat(settings, run)
            if status is None:  # someone else owns the job now: never write over them
                run.lost = True
                _signal(run, signal.SIGKILL)
                break
            if status == JobStatus.cancelling:
                _request_stop(run, "cancelled")
        if now >= run.deadline:
            _request_stop(run, "timeout")
        _escalate(settings, run, now)
        time.sleep(POLL_SECONDS)
    run.process.wait()


def _heartbeat(settings: Settings, run: Attempt) -> str | None:
    with session_scope() as session:
        job = crud.renew_lease(session, run.job_id, run.attempt, settings.lease_seconds)
        return job.status if job else None


def _request_stop(run: Attempt, reason: str) -> None:
    if run.stop_sent_at is not None:
        return
    (run.workdir / f"stop-{run.attempt}").write_text(reason)
    run.stop_sent_at, run.stop_reason = time.monotonic(), reason
    _signal(run, STOP_SIGNAL)
    log.info("job %s: asked the child to stop (%s)", run.job_id, reason)


def _escalate(settings: Settings, run: Attempt, now: float) -> None:
    """A child that ignores the stop request gets SIGTERM after the grace, then SIGKILL."""
    if run.stop_sent_at is None or now - run.stop_sent_at < settings.cancel_grace_seconds:
        return
    if run.terminated_at is None:
        run.terminated_at = now
        _signal(run, signal.SIGTERM)
    elif now - run.terminated_at > 5:
        _signal(run, signal.SIGKILL)


def _signal(run: Attempt, signum: int) -> None:
    try:
        os.killpg(run.process.pid, signum)  # the child's whole group: every DDP rank too
    except ProcessLookupError:
        pass


def outcome_of(run: Attempt) -> Outcome:
    """The child's own report, or what its death tells us."""
    reported = read_outcome(run.workdir, run.attempt)
    if reported is not None:
        return reported
    code = run.process.returncode
    if run.stop_reason is not None:  # it had to be terminated after a stop request
        status = "cancelled" if run.stop_reason == "cancelled" else "failed"
        return Outcome(
            status,
            run.stop_reason,
            error_code=None if status == "cancelled" else "timeout",
            error=f"the training process did not stop in time and was killed ({code})",
        )
    how = f"signal {-code}" if code < 0 else f"exit code {code}"
    return Outcome.failure("child_killed", f"the training process died ({how}); see the job log")


def record_end(settings: Settings, run: Attempt) -> None:
    if run.lost:
        log.warning(
            "job %s attempt %s: lease lost; leaving the job to its new owner",
            run.job_id,
            run.attempt,
        )
        return
    outcome = outcome_of(run)
    with session_scope() as session:
        job = crud.get_job(session, run.job_id)
        if job is not None and outcome.retryable and job.attempt <= job.max_restarts:
            if crud.requeue(
                session, job, f"attempt {run.attempt} failed ({outcome.error_code}); retrying"
            ):
                session.commit()
                dispatch(session, job)
            return
        status = JobStatus(outcome.status)
        crud.finish_job(
            session,
            run.job_id,
            run.attempt,
            status,
            stop_reason=outcome.stop_reason,
            reason=f"attempt {run.attempt}: {outcome.stop_reason}",
            error_code=outcome.error_code,
            error=outcome.error,
            result=outcome.result or None,
        )
