"""The supervisor<->child contract, in one place for both sides: how the child is started (argv,
environment, a warm child's assignment, the threads it trains on), how it is asked to stop (a
signal plus a file naming why), how it reports (an outcome file per attempt, a byte on its report
pipe once that file is whole, exit codes; while it trains, a progress file of the epoch's
steps), how an attempt that stopped early ended (STOPPED), and which failure codes a new
attempt could fix.

Codes (shown on the job as `error_code`; app.domain.states.ErrorCode names them all):
- retried within max_restarts: worker_lost (lease expired / supervisor gone), infrastructure
  (database or disk trouble), child_killed (the training process died of a signal nobody sent
  it, with no sign of the OOM killer: worker.supervisor.oom), child_crashed (it exited
  without reporting, e.g. an import error on this worker);
- final: non_finite_loss, invalid_data, invalid_config, out_of_memory (also a SIGKILL with the
  OOM killer's evidence), timeout, queue_timeout, disk_full (a checkpoint or model write found
  the artifacts disk full: the last good checkpoint stays, a retry would fill it again),
  internal_error (an unexpected exception: a retry would meet it again);
- worker_shutdown: its worker was shutting down and stopped the attempt at a step boundary,
  after a checkpoint; it is nobody's failure, so max_restarts does not bound it;
- preempted: a higher-priority job needed the worker (app.scheduler.preempt): stopped at an
  epoch's end, checkpointed, re-queued under the same attempt.
Retrying only what a retry can fix stops an OOM-ing or NaN-ing spec from looping (P3, P37).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.domain.job_files import JobFiles, write_whole
from app.domain.states import ErrorCode, JobStatus, StopReason

if TYPE_CHECKING:  # pydantic (and numpy under it) would load before the child's stop catcher
    from app.schemas.api import StepProgress

CHILD_MODULE = "worker.child.launch"  # `python -m CHILD_MODULE ...` is the training child
STOP_SIGNAL = signal.SIGUSR1  # "stop at the next step boundary"; the stop file says why
SUPERVISOR_ENV = "EPOCHAL_SUPERVISOR_PID"  # the runner tells its child who its parent is
SPAWNED_ENV = "EPOCHAL_SPAWNED_AT"  # wall time the supervisor started a cold child
DDP_INIT_ENV = "EPOCHAL_DDP_INIT"  # the DDP ranks' rendezvous (a file:// URL in the job dir)
GANG_ENV = "EPOCHAL_GANG_NODE"  # a multi-node job's node: NODE_RANK,NODES (see GangNode)
GANG_PEERS_ENV = "EPOCHAL_GANG_PEERS"  # every node's HOST:PORT, comma-separated, in rank order
# The attempt's secret, which every rank proves before it may use the gang's rendezvous store
# (worker.training.torch.gang_store); never logged, never in a repr.
GANG_SECRET_ENV = "EPOCHAL_GANG_SECRET"
REPORT_FD_ENV = "EPOCHAL_REPORT_FD"  # the child's end of its report pipe (spawn_child)
REPORTED = b"."  # on the report pipe: the attempt's outcome file is whole
EXIT_ORPHANED = 75  # the child found its supervisor gone before it could start
# How often the child rewrites its progress file, and the supervisor passes a change on to the
# job row (with a lease renewal): a bar moves within an epoch, the database never sees a step.
PROGRESS_SECONDS = 1.0
RETRYABLE = frozenset(
    {
        ErrorCode.worker_lost,
        ErrorCode.infrastructure,
        ErrorCode.child_killed,
        ErrorCode.child_crashed,
        ErrorCode.worker_shutdown,
        ErrorCode.preempted,
    }
)


# How an attempt that stopped before its last epoch ended, by why it stopped: the status and
# error code, whoever finds out (the child at a step boundary; the supervisor from how a
# stopping child died, or from a runtime that earlier attempts used up).
STOPPED = {
    StopReason.cancelled: (JobStatus.cancelled, None),
    StopReason.timeout: (JobStatus.failed, ErrorCode.timeout),
    StopReason.shutdown: (JobStatus.failed, ErrorCode.worker_shutdown),
    StopReason.preempted: (JobStatus.failed, ErrorCode.preempted),
    StopReason.non_finite_loss: (JobStatus.failed, ErrorCode.non_finite_loss),
}

# Stops every node agreed on at an epoch, after rank 0's checkpoint: re-queued, nobody's failure.
AGREED_STOPS = frozenset({ErrorCode.preempted, ErrorCode.worker_shutdown})

FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFull(OSError):
    """A write failed because its filesystem is full, whatever the writing library raised
    (PyTorch's zip writer says "unexpected pos", not ENOSPC): the job ends disk_full."""

    def __init__(self, folder: Path, cause: BaseException) -> None:
        why = f"{type(cause).__name__}: {cause}"
        super().__init__(errno.ENOSPC, f"no space left on the device holding {folder} ({why})")


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in FULL_DISK_ERRNOS


class JobConfigError(Exception):
    """The job's own spec cannot run on its data (e.g. a model that does not fit the input).

    Raised by training code for mistakes the user must fix; never retried.
    """


@dataclass
class Outcome:
    """How an attempt ended, as the child reports it (or the supervisor infers it)."""

    status: JobStatus  # succeeded | failed | cancelled
    stop_reason: StopReason
    error_code: ErrorCode | None = None
    error: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # From the outcome file these arrive as plain strings.
        self.status, self.stop_reason = JobStatus(self.status), StopReason(self.stop_reason)
        self.error_code = None if self.error_code is None else ErrorCode(self.error_code)

    @property
    def retryable(self) -> bool:
        return self.status == JobStatus.failed and self.error_code in RETRYABLE

    @property
    def clean(self) -> bool:
        """Not a failure: it succeeded, was cancelled, or stopped where all nodes agreed to."""
        return self.status != JobStatus.failed or self.error_code in AGREED_STOPS

    @classmethod
    def failure(
        cls, code: ErrorCode, message: str, stop_reason: StopReason = StopReason.error
    ) -> Outcome:
        return cls(JobStatus.failed, stop_reason, error_code=code, error=message)

    @classmethod
    def stopped(cls, reason: StopReason, error: str | None) -> Outcome:
        """An attempt that stopped early for `reason` (STOPPED); `error` says what happened
        (None for a cancel that stopped cleanly: nothing went wrong)."""
        status, code = STOPPED[reason]
        return cls(status, reason, error_code=code, error=error)

    @classmethod
    def disk_full(cls, exc: BaseException) -> Outcome:
        message = f"the worker's disk is full: {exc}; the last good checkpoint is kept"
        return cls.failure(ErrorCode.disk_full, message, StopReason.disk_full)


def write_outcome(files: JobFiles, attempt: int, outcome: Outcome) -> None:
    write_whole(files.outcome(attempt), json.dumps(asdict(outcome)))


def read_outcome(files: JobFiles, attempt: int) -> Outcome | None:
    path = files.outcome(attempt)
    if not path.exists():
        return None
    return Outcome(**json.loads(path.read_text()))


@dataclass(frozen=True)
class Threads:
    """A training process's CPU thread pools, as its supervisor chose them
    (worker.supervisor.threads): intra-op (within an op) and inter-op (ops side by side)."""

    intra: int
    inter: int

    def encode(self) -> str:
        return f"{self.intra},{self.inter}"

    @classmethod
    def decode(cls, text: str) -> Threads:
        intra, inter = (int(part) for part in text.split(","))
        if intra < 1 or inter < 1:
            raise ValueError(f"thread counts must be at least 1, not {text!r}")
        return cls(intra, inter)


@dataclass(frozen=True)
class GangNode:
    """This worker's node of a multi-node job: its rank among `nodes`, where rank 0's node
    hosts the rendezvous (a tcp:// URL, given to the child as DDP_INIT_ENV), and every node's
    published HOST:PORT in rank order (TensorFlow's cluster: a server per node), and the
    attempt's secret (app.scheduler.gang made it when the gang formed)."""

    rank: int
    nodes: int
    init_url: str
    peers: tuple[str, ...] = ()
    secret: str = field(default="", repr=False)

    def env(self) -> dict[str, str]:
        """What the child's environment says of it."""
        secret = {GANG_SECRET_ENV: self.secret} if self.secret else {}
        return {
            GANG_ENV: f"{self.rank},{self.nodes}",
            DDP_INIT_ENV: self.init_url,
            GANG_PEERS_ENV: ",".join(self.peers),
            **secret,
        }

    @classmethod
    def from_env(cls, env: dict[str, str]) -> GangNode | None:
        if GANG_ENV not in env:
            return None
        rank, nodes = (int(part) for part in env[GANG_ENV].split(","))
        peers = tuple(p for p in env.get(GANG_PEERS_ENV, "").split(",") if p)
        return cls(rank, nodes, env[DDP_INIT_ENV], peers, env.get(GANG_SECRET_ENV, ""))


def child_argv(
    job_id: str,
    attempt: int,
    rank: int | None = None,
    threads: Threads | None = None,
    python: str | None = None,
) -> list[str]:
    """The command line of a cold training child (and of a DDP rank, with `rank`), run by
    `python` (default: this process's interpreter)."""
    argv = [python or sys.executable, "-m", CHILD_MODULE, job_id, "--attempt", str(attempt)]
    argv += [] if rank is None else ["--rank", str(rank)]
    return argv if threads is None else [*argv, "--threads", threads.encode()]


def standby_argv(framework: str, python: str | None = None) -> list[str]:
    """The command line of a warm child that imports `framework` and waits for a job."""
    return [python or sys.executable, "-m", CHILD_MODULE, "--standby", framework]


@dataclass(frozen=True)
class Assignment:
    """The one job a warm child is handed: a JSON line on its stdin (`sent_at`: wall time),
    with the threads it trains on (a warm child starts before its job is known)."""

    job_id: str
    attempt: int
    sent_at: float
    threads: Threads | None = None

    def encode(self) -> bytes:
        message = {**asdict(self), "threads": self.threads and self.threads.encode()}
        return (json.dumps(message) + "\n").encode()

    @classmethod
    def decode(cls, line: str | bytes) -> Assignment:
        message = json.loads(line)
        threads = message.get("threads")
        return cls(
            str(message["job_id"]),
            int(message["attempt"]),
            float(message["sent_at"]),
            None if threads is None else Threads.decode(threads),
        )


def write_progress(files: JobFiles, attempt: int, progress: StepProgress) -> None:
    """Replace the attempt's progress file whole (written aside, then renamed)."""
    write_whole(files.progress(attempt), progress.model_dump_json())


def read_progress(files: JobFiles, attempt: int) -> StepProgress | None:
    """The attempt's last reported progress; None before its first report."""
    from app.schemas.api import StepProgress  # see the TYPE_CHECKING import above

    try:
        return StepProgress.model_validate_json(files.progress(attempt).read_text())
    except (FileNotFoundError, ValueError):  # none yet (or not one we can read): no news
        return None


def request_stop(files: JobFiles, attempt: int, reason: StopReason) -> None:
    """Write why the child should stop; the caller then sends STOP_SIGNAL."""
    write_whole(files.stop_request(attempt), reason)


def read_stop_reason(files: JobFiles, attempt: int, default: StopReason) -> StopReason:
    """Why the supervisor asked this attempt to stop (`default` when no file says)."""
    path = files.stop_request(attempt)
    try:
        return StopReason(path.read_text().strip())
    except (FileNotFoundError, ValueError):  # no file (or no reason we know): the default
        return default


def child_env() -> dict[str, str]:
    """The environment of a training child started by this (supervisor) process."""
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        SUPERVISOR_ENV: str(os.getpid()),
    }


def spawn_child(
    argv: list[str], env: dict[str, str], **popen: Any
) -> tuple[subprocess.Popen[bytes], int]:
    """Start a training child with a report pipe; returns it and the pipe's read end.

    The child writes REPORTED there once its outcome file is whole (say_reported), so the
    supervisor records the end then; the process's teardown (freeing its memory, a CUDA
    context: tens of milliseconds to seconds) runs after that instead of before it."""
    read, write = os.pipe()
    try:
        env = {**env, REPORT_FD_ENV: str(write)}
        process = subprocess.Popen(argv, env=env, pass_fds=(write,), **popen)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)  # the child holds its own copy: its exit reads as the pipe's end
    return process, read


def take_report_fd() -> int | None:
    """The child's end of its report pipe, out of the environment: a process it starts (a DDP
    rank) does not inherit the fd, and must not take the number for a file of its own."""
    fd = os.environ.pop(REPORT_FD_ENV, None)
    return None if fd is None else int(fd)


def say_reported(fd: int | None) -> None:
    """The child, after write_outcome: the supervisor may record the attempt's end now."""
    if fd is not None:
        with contextlib.suppress(OSError):  # its supervisor is gone: nobody is waiting
            os.write(fd, REPORTED)
            os.close(fd)
