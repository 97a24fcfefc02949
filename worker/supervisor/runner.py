"""Supervises one job attempt: claim, start the training child, watch it, record the end.

The Celery task calls run_job and nothing else. The child is a separate process in its own
session: this process keeps the job's lease alive, turns a cancel or a deadline into a stop
signal, escalates to SIGTERM and SIGKILL when the child does not stop, and writes the final
status from the child's outcome file (or from how it died). It stops the child itself when it
can no longer prove it holds the lease, so two attempts never train at once (P10).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from pathlib import Path

from sqlalchemy.exc import OperationalError

from app.core.config import Settings, get_settings
from app.core.db import retrying
from app.core.log_setup import job_context
from app.domain.job_files import JobFiles, write_whole
from app.domain.job_log import append_line, cap_log
from app.domain.states import TERMINAL, JobStatus, StopReason
from app.domain.tables import utcnow
from app.scheduler.gang import TakenSeat
from app.schemas.job_spec import JobSpec
from app.storage.registry import is_artifacts_dir
from worker.protocol import (
    SPAWNED_ENV,
    STOP_SIGNAL,
    Outcome,
    Threads,
    child_argv,
    child_env,
    is_disk_full,
    request_stop,
    spawn_child,
)
from worker.supervisor import gang_port, gang_seat, limits, shutdown, wakeup
from worker.supervisor.attempt import Attempt, note, reap, signal_group, wait_end
from worker.supervisor.claimed import Claimed
from worker.supervisor.heartbeat import set_current_job
from worker.supervisor.job_end import record, record_end
from worker.supervisor.lease import LeaseKeeper
from worker.supervisor.log_shipper import LogShipper
from worker.supervisor.standby import POOL, warm_up
from worker.supervisor.threads import cpu_budget, spare_cpu, threads_for

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2


def run_job(job_id: str, worker_name: str) -> None:
    """A message is a wake-up for this worker's slot: claim the job the scheduler puts first
    (usually the message's own; a duplicate delivery may find nothing left) and run it."""
    settings = get_settings()
    if shutdown.declined(job_id):
        return
    within = settings.lease_seconds  # a claim whose commit was lost finds the job taken
    claim = retrying(lambda: wakeup.claim(settings, worker_name), within, "claim")
    if claim is None:
        log.info(
            "job %s is not queued (taken, cancelled or ended) and no queued job fits: "
            "ignoring the message",
            job_id,
        )
        return
    if claim.job_id != job_id:  # the message went to another job: its own needs one again
        wakeup.try_republish(job_id)
    formed: gang_seat.Formed | None = None
    if isinstance(claim, TakenSeat):  # a seat in a multi-node job's gang: wait until it forms
        formed = gang_seat.wait_formed(settings, claim, worker_name)
        if formed is None:
            gang_port.let_go(claim.job_id)
            log.info("job %s: the gang did not form; this worker is free again", claim.job_id)
            return
        held = formed.claimed
    else:
        held = claim
    spec = JobSpec.model_validate(held.spec)  # once, here: from now on the spec is typed
    _set_current_job(worker_name, held.job_id)
    try:
        with job_context(held.job_id):
            _run_attempt(settings, held, spec, formed)
    finally:
        gang_port.let_go(held.job_id)  # a gang's seat port: held until its attempt is over
        _set_current_job(worker_name, None)
        if not shutdown.requested():  # a no-op unless the waiting child is gone
            warm_up(settings, [spec.framework])


def _run_attempt(
    settings: Settings, held: Claimed, spec: JobSpec, formed: gang_seat.Formed | None
) -> None:
    """Start the child (unless its time is used up or the disk is full) and see it end."""
    # max_runtime_seconds counts from the first start, across attempts.
    left = spec.max_runtime_seconds - (utcnow() - held.started_at).total_seconds()
    if left <= 0:
        record(settings, held.job_id, held.attempt, _out_of_time(spec))
        return
    try:
        attempt = start_child(
            settings, held.job_id, held.attempt, spec, left, formed, held.memory_bytes
        )
    except OSError as exc:  # the job's spec or log could not be written
        if not is_disk_full(exc):
            raise
        record(settings, held.job_id, held.attempt, Outcome.disk_full(exc))
        return
    try:
        supervise(settings, attempt)
        record_end(settings, attempt)  # a reported end before the child's teardown is over
    except BaseException:  # never leave a child training without a supervisor
        signal_group(attempt, signal.SIGKILL)
        raise
    finally:
        reap(attempt, settings.kill_grace_seconds)
        limits.close(attempt)


def _set_current_job(worker_name: str, job_id: str | None) -> None:
    try:
        set_current_job(worker_name, job_id)
    except OperationalError:  # only the /v1/workers view suffers; the job must go on
        log.warning("could not update worker %s's current job", worker_name, exc_info=True)


def _out_of_time(spec: JobSpec) -> Outcome:
    limit = spec.max_runtime_seconds
    used_up = f"max_runtime_seconds={limit} used up by earlier attempts"
    return Outcome.stopped(StopReason.timeout, used_up)


def start_child(
    settings: Settings,
    job_id: str,
    attempt: int,
    spec: JobSpec,
    seconds: float,
    formed: gang_seat.Formed | None = None,
    memory: int | None = None,
) -> Attempt:
    """The attempt's training process: a warm child taken over, or a cold one started, under
    a memory limit set from the job's admitted estimate `memory` (worker.supervisor.
    memory_limit)."""
    rank = gang_seat.rank_of(formed)
    files = _fresh_files(settings, job_id, attempt, spec, rank)
    # Another node's lines go to the database too, from this attempt on: the API reads those.
    # So do rank 0's when the store is not the artifacts directory: then the API machine shares
    # no folder with this one.
    log_path = files.log
    shipped = rank > 0 or not is_artifacts_dir(settings)
    shipper = LogShipper(job_id, rank, log_path) if shipped else None
    threads = threads_for(spec, cpu_budget(settings))
    _log_start(settings, log_path, attempt, seconds, threads, formed)
    # A gang's node is started cold: its environment names its rank and the rendezvous.
    child = None if formed else POOL.assign(spec.framework, job_id, attempt, threads)
    # The next child of this kind imports its framework while this one trains, so a job that
    # comes right after this one ends (a sweep's next trial) starts warm too; on a machine whose
    # every core trains, it starts when this job ends instead (worker.supervisor.threads).
    if spare_cpu(spec, threads):
        warm_up(settings, [spec.framework])
    if child is None:
        with log_path.open("ab") as log_file:  # the child keeps its own copy of the fd
            child = spawn_child(
                child_argv(
                    job_id, attempt, threads=threads, python=settings.python_for(spec.framework)
                ),
                gang_seat.node_env(
                    settings, formed, {**child_env(), SPAWNED_ENV: str(time.time())}
                ),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    process, report = child
    limited = limits.under(settings, job_id, attempt, memory, process, log_path)
    now = time.monotonic()
    return Attempt(
        job_id,
        attempt,
        files.root,
        now + seconds,
        process,
        now,
        formed=formed,
        shipper=shipper,
        report=report,
        limit=limited,
    )


def _fresh_files(
    settings: Settings, job_id: str, attempt: int, spec: JobSpec, rank: int
) -> JobFiles:
    """This node's files for the attempt: its spec written, its last try's control files gone."""
    # The workers may share one artifacts directory: each node of a gang writes, clears and
    # logs to files of its own (JobFiles.own, rank_log), never rank 0's.
    files = JobFiles.of(settings.resolved_artifacts_dir, job_id, rank)
    files.own.mkdir(parents=True, exist_ok=True)
    write_whole(files.spec, spec.model_dump_json())
    stale_files = (files.outcome(attempt), files.stop_request(attempt), files.progress(attempt))
    for stale in stale_files:  # a preempted attempt
        stale.unlink(missing_ok=True)  # resumes under its number: its old files must not count
    return files


def _log_start(
    settings: Settings,
    log_path: Path,
    attempt: int,
    seconds: float,
    threads: Threads,
    formed: gang_seat.Formed | None,
) -> None:
    """The attempt's first lines in this node's log: its time left, threads and gang node."""
    pools = f"{threads.intra} intra-op and {threads.inter} inter-op threads"
    append_line(log_path, f"attempt {attempt} starting (runtime left {seconds:.0f}s, {pools})")
    if formed is not None:
        append_line(log_path, gang_seat.describe(settings, formed))


def supervise(settings: Settings, attempt: Attempt) -> None:
    """Until the child exits: keep the lease, relay cancel and deadline, escalate stops."""
    lease = (
        LeaseKeeper(settings, attempt.job_id, attempt.number, attempt.renewed_at, attempt.files)
        if attempt.formed is None
        else gang_seat.SeatKeeper(settings, attempt.formed, attempt.renewed_at, attempt.files)
    )
    lease.start()
    try:
        _watch(settings, attempt, lease)
    finally:
        lease.stop()
    if not attempt.reported:  # else its end is recorded while it exits (reap)
        attempt.process.wait()


def _watch(settings: Settings, attempt: Attempt, lease: LeaseKeeper) -> None:
    next_beat = 0.0
    while attempt.process.poll() is None and not attempt.reported:
        now = time.monotonic()
        if now >= next_beat:
            next_beat = now + settings.heartbeat_seconds
            if attempt.shipper is not None:
                attempt.shipper.ship()
            dropped = cap_log(attempt.log, settings.max_log_bytes)  # keeps the newest half
            if attempt.shipper is not None:
                attempt.shipper.dropped(dropped)
        if not _still_ours(attempt, lease, now):
            return
        if now >= attempt.deadline:
            _request_stop(attempt, StopReason.timeout)
        elif shutdown.requested():
            _request_stop(attempt, StopReason.shutdown)
        _escalate(settings, attempt, now)
        attempt.memory.sample(attempt.process.pid)
        limits.check(attempt)
        wait_end(attempt, POLL_SECONDS)  # wakes as soon as the child reports its end or exits


def _still_ours(attempt: Attempt, lease: LeaseKeeper, now: float) -> bool:
    """Relay a cancel; False (child killed) once the lease is lost or could soon expire."""
    attempt.renewed_at = lease.renewed_at
    if lease.taken:
        _lose(attempt, "the job is no longer this attempt's (lease expired or re-queued)")
        return False
    if lease.expiring(now):  # renewals failed or hang: the database is away or unreachable
        _lose(attempt, "could not renew the lease; stopping before it expires")
        return False
    if lease.broken and attempt.broken is None:  # a gang's rank is gone: the attempt is over
        attempt.broken = lease.broken
        signal_group(attempt, signal.SIGKILL)
        note(attempt, f"{lease.broken}: killed the training process (the gang stops whole)")
    if lease.status in TERMINAL:  # another node of a gang whose end rank 0 has recorded
        _request_stop(attempt, StopReason.completed)  # it exits on its own, within the graces
    elif lease.status == JobStatus.cancelling:
        _request_stop(attempt, StopReason.cancelled)
    elif lease.preempted:  # a higher-priority job asked for this worker: stop at the epoch
        _request_stop(attempt, StopReason.preempted)
    return True


def _lose(attempt: Attempt, why: str) -> None:
    attempt.lost = True
    signal_group(attempt, signal.SIGKILL)
    note(attempt, f"{why}: killed the training process")


def _request_stop(attempt: Attempt, reason: StopReason) -> None:
    if attempt.stop_sent_at is not None:
        return
    request_stop(attempt.files, attempt.number, reason)
    attempt.stop_sent_at, attempt.stop_reason = time.monotonic(), reason
    signal_group(attempt, STOP_SIGNAL)
    note(attempt, f"asked the training process to stop ({reason})")


def _escalate(settings: Settings, attempt: Attempt, now: float) -> None:
    """A child that ignores the stop request gets SIGTERM after the grace, then SIGKILL."""
    if attempt.stop_sent_at is None or now - attempt.stop_sent_at < settings.cancel_grace_seconds:
        return
    if attempt.terminated_at is None:
        attempt.terminated_at = now
        signal_group(attempt, signal.SIGTERM)
        note(attempt, f"no stop after {settings.cancel_grace_seconds:g}s: sent SIGTERM")
    elif attempt.killed_at is None and now - attempt.terminated_at >= settings.kill_grace_seconds:
        attempt.killed_at = now
        signal_group(attempt, signal.SIGKILL)
        note(attempt, f"still running {settings.kill_grace_seconds:g}s after SIGTERM: sent SIGKILL")
