"""The training child: `python -m worker.child.launch JOB_ID --attempt N [--rank R]`.

Started (and watched) by worker.supervisor.runner, never imported by the Celery process: the
framework is imported here, in a fresh process per attempt, so GPU memory, TensorFlow strategies
and CUDA state die with it (RELIABILITY.md P12-P16). A PyTorch DDP job starts one such
process per rank from here; they share a process group, so a stop signal reaches every rank.
"""

from __future__ import annotations

# isort: off
from worker.child import early_stop  # first: a stop signal from here on is caught, not fatal

# isort: on
import argparse
import contextlib
import ctypes
import errno
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from setproctitle import setproctitle

from app.core import db
from app.core.config import get_settings
from app.core.log_setup import configure_logging
from app.domain.job_files import JobFiles
from app.domain.states import ErrorCode, StopReason
from app.schemas.job_spec import FRAMEWORKS, JobSpec
from app.storage.base import StoreError
from worker.cpu_priority import idle_while_waiting
from worker.protocol import (
    CHILD_MODULE,
    DDP_INIT_ENV,
    EXIT_ORPHANED,
    GANG_ENV,
    SPAWNED_ENV,
    STOP_SIGNAL,
    SUPERVISOR_ENV,
    Assignment,
    GangNode,
    JobConfigError,
    Outcome,
    Threads,
    child_argv,
    is_disk_full,
    read_stop_reason,
    say_reported,
    take_report_fd,
    write_outcome,
)
from worker.training.backend import Placement
from worker.training.callbacks import TrainState

log = logging.getLogger("epochal.child")
RANK_GRACE_SECONDS = 60.0


def die_with_parent() -> None:
    """Ask Linux to SIGKILL us if our supervisor dies, so no orphan keeps training.

    The request only covers a parent that dies *after* it is made: if the supervisor died while
    this process was starting, we have been re-parented already and must exit ourselves.
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    # Popped: DDP ranks started from here get this process's pid instead (run_ranks).
    supervisor = os.environ.pop(SUPERVISOR_ENV, None)
    if supervisor is not None and os.getppid() != int(supervisor):
        os._exit(EXIT_ORPHANED)


def node_files(artifacts_dir: Path, job_id: str) -> JobFiles:
    """The job's files as this process's node sees them: a gang's node N has its own."""
    node = GangNode.from_env(dict(os.environ))  # as its supervisor chose (JobFiles.own)
    return JobFiles.of(artifacts_dir, job_id, node.rank if node else 0)


def listen_for_stop(state: TrainState, files: JobFiles, attempt: int) -> None:
    """On STOP_SIGNAL read why (cancelled | timeout | shutdown | preempted); the loop stops at
    a step, or for a preemption at the end of the epoch in flight (no work is lost)."""

    def on_signal(_signum: int, _frame: object) -> None:
        reason = read_stop_reason(files, attempt, default=StopReason.cancelled)
        if reason != StopReason.preempted:
            state.interrupt = reason
        state.request_stop(reason)

    signal.signal(STOP_SIGNAL, on_signal)
    if early_stop.arrived():  # sent while this process was still starting
        on_signal(STOP_SIGNAL, None)


def placement_for(spec: JobSpec, rank: int, threads: Threads | None) -> Placement:
    """This process's part: a DDP rank (PyTorch, one process per replica) or every replica
    of a MirroredStrategy (TensorFlow, one process), on the threads its supervisor chose.
    Started by hand without them, DDP ranks split the CPUs this process may run on (its
    affinity, not the machine's core count), so they do not oversubscribe."""
    replicas = spec.resources.replica_count
    node = GangNode.from_env(dict(os.environ))
    world = replicas * (node.nodes if node else 1)
    ddp = spec.framework == "pytorch" and world > 1
    if threads is None and ddp:
        threads = Threads(max(1, len(os.sched_getaffinity(0)) // replicas), 1)
    gpus = ([rank] if ddp else list(range(replicas))) if spec.resources.gpus else []
    return Placement(
        # A node of a gang is its replicas' share of the ranks: global rank = node × replicas
        # + local rank, so the global batch is split over every node's replicas.
        replicas=world if ddp or spec.framework == "tensorflow" else 1,
        rank=rank + (node.rank * replicas if node else 0),
        gpus=gpus,
        threads=None if threads is None else threads.intra,
        interop_threads=None if threads is None else threads.inter,
        timeout_seconds=get_settings().collective_timeout_seconds,
        peers=node.peers if node else (),
    )


def run_ranks(
    job_id: str, attempt: int, files: JobFiles, replicas: int, threads: Threads | None
) -> int:
    """Start one process per DDP rank and wait; when one ends, the rest may not linger.

    Ranks agree on when and why to stop, and one that raises breaks the others' collectives,
    so after a rank exits the others normally exit within moments (rank 0 writing the
    outcome); one still running after RANK_GRACE_SECONDS is stuck and is killed. A rank
    killed by a signal cannot take part any more: the others are killed at once.
    """
    signal.signal(STOP_SIGNAL, signal.SIG_IGN)  # the ranks themselves handle it
    store = files.ddp_store(attempt)
    store.unlink(missing_ok=True)
    # A rank still starting when this process dies is re-parented before it can ask for
    # PR_SET_PDEATHSIG: told who its parent is, it sees that and exits (die_with_parent).
    # A gang's node meets the others where its supervisor said (GangNode): keep that.
    init = os.environ.get(DDP_INIT_ENV) if GANG_ENV in os.environ else f"file://{store}"
    env = {**os.environ, DDP_INIT_ENV: str(init), SUPERVISOR_ENV: str(os.getpid())}
    ranks = [
        subprocess.Popen(child_argv(job_id, attempt, rank, threads), env=env)
        for rank in range(replicas)
    ]
    first_exit: float | None = None
    while any(rank.poll() is None for rank in ranks):
        codes = [rank.poll() for rank in ranks]
        if first_exit is None and any(code is not None for code in codes):
            first_exit = time.monotonic()
        killed = any(code is not None and code < 0 for code in codes)
        if killed or (first_exit and time.monotonic() - first_exit > RANK_GRACE_SECONDS):
            for rank in ranks:
                if rank.poll() is None:
                    rank.kill()
        time.sleep(0.2)
    store.unlink(missing_ok=True)
    return next((rank.returncode for rank in ranks if rank.returncode), 0)


def classify(exc: BaseException) -> Outcome:
    """Map an exception to a failure code that tells the supervisor whether to retry."""
    name = type(exc).__name__
    text = f"{name}: {exc}"
    if isinstance(exc, MemoryError) or "out of memory" in str(exc).lower():
        return Outcome.failure(
            ErrorCode.out_of_memory, f"ran out of memory: {text}; use a smaller batch or model"
        )
    if isinstance(exc, JobConfigError):
        return Outcome.failure(
            ErrorCode.invalid_config, f"{exc}; fix the job spec and submit again"
        )
    if name == "LostOwnership":
        return Outcome.failure(ErrorCode.worker_lost, text)
    if name in ("OperationalError", "InterfaceError", "DatabaseError"):
        return Outcome.failure(ErrorCode.infrastructure, f"database unavailable: {text}")
    if isinstance(exc, StoreError):  # e.g. down past EPOCHAL_STORE_WAIT_SECONDS at a resume
        return Outcome.failure(
            ErrorCode.infrastructure, f"the artifact store failed: {text}; the attempt is retried"
        )
    if is_disk_full(exc):
        return Outcome.disk_full(exc)
    if isinstance(exc, OSError) and exc.errno == errno.EIO:
        return Outcome.failure(ErrorCode.infrastructure, f"storage trouble on the worker: {text}")
    return Outcome.failure(
        ErrorCode.internal_error, f"{text}; GET /v1/jobs/{{id}}/logs shows the traceback"
    )


def wait_for_assignment(framework: str) -> Assignment:
    """Standby mode (worker.supervisor.standby): import the framework at idle CPU priority
    (worker.cpu_priority), then wait on stdin."""
    import importlib

    from worker.training.backend import BACKENDS

    idle_while_waiting()  # the supervisor puts it back when it hands over a job
    importlib.import_module(BACKENDS[framework].split(":")[0]).preload()
    importlib.import_module("worker.child.train_attempt")
    importlib.import_module("worker.child.sinks").warm_connection()  # its connection and statements
    with contextlib.suppress(ImportError):  # what a sweep's trial reports to: a heavy import
        importlib.import_module("optuna")
    importlib.import_module("worker.training.onnx_export").preload()  # the job's last step
    importlib.import_module("worker.training.checkpoint_upload").preload()  # an S3 client
    line = sys.stdin.readline()
    if not line:  # the supervisor went away without a job for us
        os._exit(0)
    return Assignment.decode(line)


def write_output_to(path: Path) -> None:
    """From now on stdout and stderr go to the job's log (a warm child starts detached)."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=CHILD_MODULE)
    parser.add_argument("job_id", nargs="?")
    parser.add_argument("--attempt", type=int)
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--standby", choices=FRAMEWORKS, default=None)
    parser.add_argument("--threads", type=Threads.decode, default=None, help="INTRA,INTER")
    args = parser.parse_args(argv)
    if args.standby is None and (args.job_id is None or args.attempt is None):
        parser.error("JOB_ID and --attempt are required (or --standby FRAMEWORK)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = take_report_fd()
    die_with_parent()
    settings = get_settings()
    db.hold_rows_at_most(max(1.0, settings.lease_seconds / 4))  # before its first connection
    if args.standby:
        job = wait_for_assignment(args.standby)
        args.job_id, args.attempt, started = job.job_id, job.attempt, job.sent_at
        args.threads = job.threads
        # From now on `ps` shows what a cold child would show: the job id, attempt, threads.
        setproctitle(" ".join(child_argv(args.job_id, args.attempt, threads=args.threads)))
        # Only a one-node job gets a warm child (a gang's nodes start cold, their output
        # already in their own log, JobFiles.rank_log): its log is the job's.
        write_output_to(JobFiles.of(settings.resolved_artifacts_dir, args.job_id).log)
    else:
        started = float(os.environ.pop(SPAWNED_ENV, time.time()))
    configure_logging("child", job_id=args.job_id)  # to this node's log, the job id on each line
    files = node_files(settings.resolved_artifacts_dir, args.job_id)
    spec = JobSpec.model_validate_json(files.spec.read_text())
    placement = placement_for(spec, args.rank or 0, args.threads)
    local = spec.resources.replica_count  # this node's ranks (a gang's others run elsewhere)
    if args.rank is None and spec.framework == "pytorch" and local > 1:
        return run_ranks(args.job_id, args.attempt, files, local, args.threads)
    state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
    listen_for_stop(state, files, args.attempt)
    from worker.child.train_attempt import (
        train,  # after the signal handler: importing a framework is slow
    )

    timings = {"startup_s": time.time() - started}  # spawn (or hand-over) to training code
    try:
        outcome = train(
            spec,
            args.job_id,
            args.attempt,
            files.root,
            placement,
            state,
            settings.resolved_data_dir,
            timings,
        )
    except BaseException as exc:  # report every failure with a code; the log gets the trace
        traceback.print_exc()
        outcome = classify(exc)
    if placement.is_main:
        write_outcome(files, args.attempt, outcome)
        say_reported(report)  # the supervisor records the end while this process exits
    log.info("attempt %s ended: %s (%s)", args.attempt, outcome.status, outcome.stop_reason)
    # A gang's other nodes report by exit code alone (worker.supervisor.gang_seat.end_seat): a
    # preemption or shutdown stop every node agreed on is a clean end there, not a lost node.
    return 0 if outcome.clean else 1


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown of the framework (~1 s): the outcome and the
    log are written and flushed, and nothing else of this process outlives it."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
