"""TensorFlow's small-step thread count, measured once per machine when a worker starts.

Which count wins depends on the CPU, not only on the step: a second intra-op thread pays off
only where a small op's work outweighs handing out its shards and waiting for both halves, and
that balance moves with the CPU's cores and caches (the figures on two machine classes are in
docs/benchmarks.md, "The worker"). TensorFlow fixes its pools when its runtime starts, so
each count is timed in a process of its own (worker.training.tf.calibrate, the back-end's own
step), and the faster one is written down for this CPU model, CPU count and TensorFlow version
in the cache folder, which the TensorFlow back-end reads.

The worker measures in the background, at idle priority, before its warm children import (they
would share the CPU), and only where the machine's answer is missing. A job that comes meanwhile
starts cold, and its small step runs on one thread, the rule before measuring.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from app.core.config import Settings

log = logging.getLogger(__name__)
CALIBRATION_FILE = "tf-small-step.json"
MEASURE = "worker.training.tf.calibrate"  # run as a process, never imported here
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Within this much of each other, one thread stays: it leaves the rest of the machine free.
SAME_SPEED = 0.03
ROUNDS = 2


def calibrate_then(settings: Settings, budget: int, then: threading.Thread) -> bool:
    """Measure this machine in the background when its answer is missing, then start `then`
    (the warm-up); False (and nothing started) when there is nothing to measure."""
    folder = settings.resolved_cache_dir
    if budget < 2 or tensorflow_version() == "none":
        return False
    if measured_threads(folder, budget) is not None:
        return False

    def measure_then_warm() -> None:
        try:
            calibrate(folder, budget, settings.python_for("tensorflow") or sys.executable)
        except Exception:  # a machine without an answer keeps the one-thread rule
            log.warning("could not measure TensorFlow's small step here", exc_info=True)
        then.start()

    threading.Thread(target=measure_then_warm, name="tf-calibration", daemon=True).start()
    return True


def calibrate(folder: Path, budget: int, python: str) -> int:
    """Time the small step on 1 and on `budget` threads, alternated, and write down the faster
    count (one worker of the machine measures; another waits for its answer)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f".{CALIBRATION_FILE}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        known = measured_threads(folder, budget)
        if known is not None:
            return known
        # Alternated, best of each: a process that shared the machine with something else for a
        # while measures slow, and once per count would let that decide.
        seconds = {1: float("inf"), budget: float("inf")}
        for threads in [1, budget] * ROUNDS:
            seconds[threads] = min(seconds[threads], _epoch_seconds(python, threads))
        best = budget if seconds[budget] < seconds[1] * (1 - SAME_SPEED) else 1
        record(folder, budget, best, seconds)
    rounded = {count: round(value, 4) for count, value in seconds.items()}
    log.info("TensorFlow's small step: %s s an epoch by thread count; %d chosen", rounded, best)
    return best


def _epoch_seconds(python: str, threads: int) -> float:
    done = subprocess.run(
        [python, "-m", MEASURE, str(threads)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},  # the CPU's step, not a GPU's
        preexec_fn=_idle_and_dying_with_us,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def _idle_and_dying_with_us() -> None:
    """In the measuring process: idle priority, and SIGKILL when the worker goes (no orphan)."""
    os.nice(19)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def record(folder: Path, budget: int, best: int, seconds: dict[int, float]) -> None:
    """Write down the machine's answer beside any other machine's, atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CALIBRATION_FILE
    try:
        answers = json.loads(path.read_text())
    except (OSError, ValueError):
        answers = {}
    answers[box_key(budget)] = {
        "threads": best,
        "epoch_seconds": {str(k): round(v, 6) for k, v in seconds.items()},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(answers, indent=1))
    os.replace(tmp, path)


def measured_threads(folder: Path, cpus: int) -> int | None:
    """The faster count for a small step on this machine, if measured (None: not yet)."""
    try:
        answers = json.loads((folder / CALIBRATION_FILE).read_text())
        return int(answers[box_key(cpus)]["threads"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def box_key(cpus: int) -> str:
    """What the answer depends on: the CPU model, how many CPUs train, TensorFlow's version."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            names = (line.split(":", 1)[1] for line in info if line.startswith("model name"))
            model = next(names, model).strip()
    except OSError:
        pass
    return f"{model} | {cpus} CPUs | tensorflow {tensorflow_version()}"


@functools.cache  # read at each worker start and in each TensorFlow child: look it up once
def tensorflow_version() -> str:
    """The installed TensorFlow's version, without importing it ("none": not installed)."""
    for name in ("tensorflow", "tensorflow-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "none"
