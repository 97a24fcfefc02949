"""The supervisor with real child processes and a real database: escalation, fencing, and how
an attempt's end is recorded (retry or final)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.core.config import Settings, get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus, RequeueCause
from app.domain.tables import Job
from app.schemas.api import StepProgress
from app.schemas.job_spec import JobSpec
from tests.helpers import ROOT, clear_caches, free_port, scaled, wait_until
from worker.protocol import (
    REPORT_FD_ENV,
    SUPERVISOR_ENV,
    Outcome,
    child_argv,
    spawn_child,
    write_progress,
)
from worker.supervisor.attempt import Attempt, reap
from worker.supervisor.job_end import outcome_of, record, record_end
from worker.supervisor.oom import MemoryWatch, memory_available, peak_rss
from worker.supervisor.runner import supervise

STUBBORN = (
    "import signal, time\n"
    "for s in (signal.SIGUSR1, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def settings(db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for key, value in {
        "EPOCHAL_HEARTBEAT_SECONDS": "0.2",
        "EPOCHAL_LEASE_SECONDS": "1",
        "EPOCHAL_CANCEL_GRACE_SECONDS": "0.5",
        "EPOCHAL_KILL_GRACE_SECONDS": "0.5",
    }.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    return get_settings()


def running_job(max_restarts: int = 1) -> Job:
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"name": "digits"}, "max_restarts": max_restarts}
    )
    with session_scope() as session:
        job_id = crud.create_job(session, spec, "gpus-0").id
    with session_scope() as session:
        job = crud.claim_job(session, job_id, "w1", lease_seconds=30)
        assert job is not None
        return job


def attempt_of(job: Job, settings: Settings, code: str, deadline: float = 1e12) -> Attempt:
    """A real child in its own session, as worker.supervisor.runner starts them."""
    workdir = JobFiles.of(settings.resolved_artifacts_dir, job.id).root
    workdir.mkdir(parents=True, exist_ok=True)
    process, report = spawn_child(
        [sys.executable, "-c", code],
        dict(os.environ),
        stdout=subprocess.PIPE,
        start_new_session=True,
        cwd=ROOT,
    )
    if "ready" in code:  # signal it only once its handlers are in place
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    now = time.monotonic()
    return Attempt(
        job.id, job.attempt, workdir, now + deadline, process, renewed_at=now, report=report
    )


def stored(job_id: str) -> Job:
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        return job


def test_child_ignoring_stop_gets_sigterm_then_sigkill(settings: Settings) -> None:
    job = running_job()
    attempt = attempt_of(job, settings, STUBBORN, deadline=0)  # past its deadline at once
    supervise(settings, attempt)
    assert attempt.process.returncode == -signal.SIGKILL and attempt.stop_reason == "timeout"
    assert attempt.stop_sent_at and attempt.terminated_at and attempt.killed_at
    assert attempt.terminated_at - attempt.stop_sent_at >= settings.cancel_grace_seconds
    assert attempt.killed_at - attempt.terminated_at >= settings.kill_grace_seconds
    record_end(settings, attempt)
    done = stored(job.id)
    assert (done.status, done.stop_reason, done.error_code) == ("failed", "timeout", "timeout")
    assert "did not stop in time" in (done.error or "")
    notes = JobFiles(attempt.workdir).log.read_text()
    assert "sent SIGTERM" in notes and "sent SIGKILL" in notes


def test_supervisor_kills_its_child_when_another_attempt_owns_the_job(
    settings: Settings,
) -> None:
    job = running_job()
    attempt = attempt_of(job, settings, "import time; time.sleep(120)")
    with session_scope() as session:  # the reaper re-queued it and another worker claimed it
        assert crud.requeue(session, session.get(Job, job.id), RequeueCause.lost)  # type: ignore[arg-type]
    with session_scope() as session:
        assert crud.claim_job(session, job.id, "w2", 30) is not None
    supervise(settings, attempt)
    assert attempt.lost and attempt.process.returncode == -signal.SIGKILL
    record_end(settings, attempt)  # a lost attempt writes nothing over its successor
    assert (stored(job.id).status, stored(job.id).attempt) == ("running", 2)


def test_the_childs_step_progress_reaches_the_job_row_while_its_attempt_lasts(
    settings: Settings,
) -> None:
    job = running_job()
    attempt = attempt_of(job, settings, "import time; time.sleep(120)")
    supervisor = threading.Thread(target=supervise, args=(settings, attempt))
    supervisor.start()
    try:
        for step in (10, 20):  # as the child's writer (worker.child.progress) reports it
            progress = StepProgress(epoch=1, step=step, steps=50)
            write_progress(attempt.files, attempt.number, progress)
            wait_until(
                lambda progress=progress: stored(job.id).step_progress == progress.model_dump(),
                scaled(10),
                f"step {step} on the job row",
            )
    finally:
        attempt.process.kill()
        supervisor.join()
    record_end(settings, attempt)  # killed: re-queued for another attempt, which starts afresh
    assert (stored(job.id).status, stored(job.id).step_progress) == ("queued", None)


def test_supervisor_stops_its_child_when_the_database_is_gone(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = running_job()
    attempt = attempt_of(job, settings, "import time; time.sleep(120)")
    real_url = os.environ.get("EPOCHAL_DATABASE_URL")
    # A real unreachable server: nothing listens on this port.
    monkeypatch.setenv(
        "EPOCHAL_DATABASE_URL", f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/x"
    )
    clear_caches()
    started = time.monotonic()
    try:
        supervise(settings, attempt)
    finally:  # the fixtures' teardown needs the real database back
        if real_url is None:
            monkeypatch.delenv("EPOCHAL_DATABASE_URL")
        else:
            monkeypatch.setenv("EPOCHAL_DATABASE_URL", real_url)
        clear_caches()
    # It cannot prove it holds the lease any more: it stops before the lease could expire.
    assert attempt.lost and attempt.process.returncode == -signal.SIGKILL
    assert time.monotonic() - started < settings.lease_seconds + 1


@pytest.mark.parametrize(
    ("code", "error_code"),
    [
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "child_killed"),
        ("exit(3)", "child_crashed"),
    ],
)
def test_a_silent_death_is_a_retryable_failure(
    settings: Settings, code: str, error_code: str
) -> None:
    job = running_job()
    attempt = attempt_of(job, settings, code)
    supervise(settings, attempt)
    outcome = outcome_of(attempt)
    assert outcome.error_code == error_code and outcome.retryable


def test_the_end_is_recorded_once_reported_while_the_process_still_exits(
    settings: Settings,
) -> None:
    """A child's teardown (its memory freed, a CUDA context) comes after its outcome: the end is
    written at the child's word, and one that then lingers past the grace is killed."""
    job = running_job()
    workdir = JobFiles.of(settings.resolved_artifacts_dir, job.id).root
    lingering = (
        "import time\n"
        "from pathlib import Path\n"
        "from app.domain.job_files import JobFiles\n"
        "from worker.protocol import Outcome, say_reported, take_report_fd, write_outcome\n"
        f"files = JobFiles(Path({str(workdir)!r}))\n"
        "write_outcome(files, 1, Outcome('succeeded', 'completed', result={'epochs': 1}))\n"
        "say_reported(take_report_fd())\n"
        "time.sleep(120)\n"
    )
    attempt = attempt_of(job, settings, lingering)
    supervise(settings, attempt)
    assert (
        attempt.reported and attempt.process.poll() is None
    )  # the end is known, the process lives
    record_end(settings, attempt)
    assert stored(job.id).status == "succeeded"
    reap(attempt, settings.kill_grace_seconds)
    assert attempt.process.returncode == -signal.SIGKILL and attempt.report is None
    assert "still exiting" in JobFiles(attempt.workdir).log.read_text()


def test_a_child_that_exits_without_a_word_is_seen_at_its_exit(settings: Settings) -> None:
    job = running_job()
    attempt = attempt_of(job, settings, f"import os; os.close(int(os.environ[{REPORT_FD_ENV!r}]))")
    supervise(
        settings, attempt
    )  # the pipe's end comes first, then the exit: no end to record early
    assert not attempt.reported and attempt.process.returncode == 0


def test_retryable_failures_are_retried_within_max_restarts(settings: Settings) -> None:
    job = running_job(max_restarts=1)
    record(settings, job.id, 1, Outcome.failure("child_killed", "died (signal SIGKILL)"))
    requeued = stored(job.id)
    assert requeued.status == JobStatus.queued and requeued.dispatched_at is not None
    with session_scope() as session:
        assert crud.claim_job(session, job.id, "w2", 30) is not None
    record(settings, job.id, 2, Outcome.failure("child_killed", "died again"))
    done = stored(job.id)
    assert (done.status, done.error_code, done.attempt) == ("failed", "child_killed", 2)
    assert "max_restarts reached" in (done.error or "")


@pytest.mark.parametrize("code", ["non_finite_loss", "invalid_data", "out_of_memory"])
def test_failures_of_the_job_itself_are_not_retried(settings: Settings, code: str) -> None:
    job = running_job(max_restarts=2)
    record(settings, job.id, 1, Outcome.failure(code, "the job's own problem"))
    done = stored(job.id)
    assert (done.status, done.error_code, done.attempt) == ("failed", code, 1)


def test_a_job_being_cancelled_is_never_retried(settings: Settings) -> None:
    job = running_job(max_restarts=2)
    with session_scope() as session:
        crud.request_cancel(session, session.get(Job, job.id))  # type: ignore[arg-type]
    record(settings, job.id, 1, Outcome.failure("child_killed", "died while stopping"))
    assert (stored(job.id).status, stored(job.id).stop_reason) == ("cancelled", "cancelled")


def test_runtime_used_up_by_earlier_attempts_ends_without_starting(settings: Settings) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    from worker.supervisor import runner

    job = running_job()
    with session_scope() as session:  # first started two days ago; a new attempt is queued
        session.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(started_at=job.started_at - timedelta(days=2))  # type: ignore[operator]
        )
        crud.requeue(session, session.get(Job, job.id, populate_existing=True), RequeueCause.lost)  # type: ignore[arg-type]
    runner.run_job(job.id, "w2")
    done = stored(job.id)
    assert (done.status, done.stop_reason, done.attempt) == ("failed", "timeout", 2)
    spec_file = JobFiles.of(settings.resolved_artifacts_dir, job.id).spec
    assert not spec_file.exists()  # no child was started


def test_child_whose_supervisor_already_died_exits_at_once(tmp_path: Path) -> None:
    # PR_SET_PDEATHSIG only covers a parent dying later; a child re-parented while starting
    # must notice by itself. Here its "supervisor" is a pid that is not its parent.
    env = {**os.environ, SUPERVISOR_ENV: "1", "EPOCHAL_HOME": str(tmp_path)}
    done = subprocess.run(
        child_argv("no-such-job", 1),
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=scaled(60),
    )
    assert done.returncode == 75, done.stderr.decode()


HOLDER = (
    "import time\n"
    "held = bytearray(64 * 2**20)\n"  # zero-filled: every page resident
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def killed_from_outside(settings: Settings, available: int) -> Outcome:
    """Supervise a child holding 64 MiB on a box with `available` bytes free, SIGKILL it from
    outside once the supervisor has sampled its memory (as the kernel would), and judge."""
    attempt = attempt_of(running_job(), settings, HOLDER)
    attempt.memory.available_at_start = available
    watcher = threading.Thread(target=supervise, args=(settings, attempt))
    watcher.start()
    wait_until(lambda: attempt.memory.peak_rss >= 64 * 2**20, 30, "the child's peak RSS sampled")
    os.kill(attempt.process.pid, signal.SIGKILL)
    watcher.join()
    return outcome_of(attempt)


def test_a_sigkill_near_the_memory_limit_is_out_of_memory_and_final(settings: Settings) -> None:
    outcome = killed_from_outside(settings, available=80 * 2**20)
    assert (outcome.error_code, outcome.retryable) == ("out_of_memory", False)
    assert "out-of-memory killer" in (outcome.error or "")


def test_a_sigkill_far_from_the_limit_stays_a_retryable_kill(settings: Settings) -> None:
    outcome = killed_from_outside(settings, available=64 * 2**30)
    assert (outcome.error_code, outcome.retryable) == ("child_killed", True)


def test_the_supervisors_own_sigkill_is_never_taken_for_oom(settings: Settings) -> None:
    attempt = attempt_of(running_job(), settings, HOLDER)
    attempt.memory = MemoryWatch(oom_kills_at_start=None, available_at_start=1, peak_rss=2**30)
    attempt.killed_at = 1.0  # as _escalate records the SIGKILL it sent
    os.kill(attempt.process.pid, signal.SIGKILL)
    attempt.process.wait()
    assert outcome_of(attempt).error_code == "child_killed"


def test_this_host_reports_available_and_peak_memory() -> None:
    assert (memory_available() or 0) > 2**20 and (peak_rss(os.getpid()) or 0) > 2**20


def test_an_attempts_end_records_what_the_job_keeps_on_disk(settings: Settings) -> None:
    """The key's storage quota counts a job's artifacts as they are once an attempt ended."""
    job = running_job(max_restarts=0)
    files = JobFiles.of(settings.resolved_artifacts_dir, job.id)
    (files.root / "checkpoints").mkdir(parents=True)
    (files.root / "checkpoints" / "epoch-0001").write_bytes(b"x" * 3000)
    files.log.write_bytes(b"y" * 500)
    record(settings, job.id, 1, Outcome.failure("invalid_data", "the job's own problem"))
    assert stored(job.id).disk_bytes == 3500
