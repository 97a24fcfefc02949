"""The CPU threads each training process gets, chosen here rather than left to the frameworks.

PyTorch (OpenMP) and TensorFlow size their pools by the machine's cores. A job's intra-op
threads wait for each other at every operation, so when anything else on the machine takes a core
(the API answering a poll, the supervisor, the next warm child's import) every thread of the
step waits for the one that lost it. So the
worker has a CPU budget: EPOCHAL_WORKER_CPUS, by default the CPUs it may run on (its affinity
mask, or its cgroup's CPU quota when that is smaller: a container's `cpus:`), less one for the
service's own processes on a machine of RESERVE_FROM_CPUS or more. A job trains on all of it, or on
`resources.cpu_threads` if that is lower (a higher value gets the budget: the API cannot know
which worker takes the job); DDP ranks split it. The warm child that takes a job gets the same
count as a cold one. The count is a ceiling: TensorFlow's back-end runs a lone replica's step
that is too small to share on one thread (worker.training.tf.strategy.fitted_to_step).

The service's own work is mostly the next warm child's import (seconds of CPU); the API's and
the supervisor's are bursts of milliseconds. A core kept for it is a quarter of a 4-core machine but
half of a 2-core one. So on a small machine the job gets every core and the next warm child starts
when the job ends (spare_cpu), not beside it: an import beside a job that has every core
takes a core whenever one of the job's threads waits, and shares the caches and memory
bandwidth even at idle priority, so every step of the job waits on it (figures:
docs/benchmarks.md, "The worker").
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from app.core.config import Settings
from app.schemas.job_spec import JobSpec
from worker.protocol import Threads

# The API, the Celery process with its supervisor, and the next warm child's import: together
# about one core's worth of work beside a training job, mostly in bursts. It is kept for them
# only where it is at most a quarter of the machine.
SERVICE_CPUS = 1
RESERVE_FROM_CPUS = 4
CGROUP = Path("/sys/fs/cgroup")


def cpu_budget(settings: Settings) -> int:
    """How many CPU threads this worker's training processes may keep busy, together."""
    if settings.worker_cpus is not None:
        return settings.worker_cpus
    cpus = usable_cpus()
    return max(1, cpus - SERVICE_CPUS) if cpus >= RESERVE_FROM_CPUS else cpus


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, capped by its cgroup's quota."""
    cpus = len(os.sched_getaffinity(0))
    quota = cpu_quota(CGROUP, Path("/proc/self/cgroup"))
    return min(cpus, quota or cpus)


def spare_cpu(spec: JobSpec, threads: Threads) -> bool:
    """Whether the job's training threads leave a CPU free for the next warm child's import."""
    return threads.intra * training_processes(spec) < usable_cpus()


def training_processes(spec: JobSpec) -> int:
    """PyTorch runs a process per DDP rank; TensorFlow holds every replica in one process."""
    return spec.resources.replica_count if spec.framework == "pytorch" else 1


def cpu_quota(root: Path, membership: Path) -> int | None:
    """The CPUs this process's cgroup may use, rounded up (None: no quota, or none found):
    cgroup v2's `cpu.max` ("max 100000", "150000 100000") or v1's cpu.cfs_quota_us/period."""
    try:
        lines = [line.split(":", 2) for line in membership.read_text().splitlines()]
    except OSError:
        return None
    for _, controllers, group in (parts for parts in lines if len(parts) == 3):
        if controllers == "":  # v2: one hierarchy, every controller
            files = [root / group.lstrip("/") / "cpu.max"]
        elif "cpu" in controllers.split(","):
            folder = root / controllers / group.lstrip("/")
            files = [folder / "cpu.cfs_quota_us", folder / "cpu.cfs_period_us"]
        else:
            continue
        try:
            fields = " ".join(path.read_text() for path in files).split()
        except OSError:
            continue
        if fields[0] in ("max", "-1"):
            return None
        return max(1, math.ceil(int(fields[0]) / int(fields[1])))
    return None


def threads_for(spec: JobSpec, budget: int) -> Threads:
    """The thread pools of each training process of the job.

    Intra-op: the job's share of the budget, split evenly among PyTorch's DDP ranks (one
    process each). Inter-op: PyTorch runs a step's ops one after another (one thread);
    TensorFlow keeps one per replica plus one, since a MirroredStrategy's replicas wait for
    each other in their collectives and each needs a thread to get there.
    """
    wanted = min(budget, spec.resources.cpu_threads or budget)
    if spec.framework == "pytorch":
        return Threads(intra=max(1, wanted // training_processes(spec)), inter=1)
    return Threads(intra=wanted, inter=spec.resources.replica_count + 1)
