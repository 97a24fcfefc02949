"""Each training process runs under a memory limit set from its job's admitted estimate.

The limit is the estimate (app.domain.cost, stored on the job at submit) times 1 +
EPOCHAL_JOB_MEMORY_MARGIN, or EPOCHAL_JOB_MEMORY_LIMIT_BYTES. It is enforced, in order of
preference, by a cgroup v2 group (cgroup_v2), a cgroup v1 memory group (cgroup_v1), or where
the worker may make neither, by the supervisor's watchdog over resident memory (watchdog).
The group is made before the child trains and the child moved in; it is removed after the
child's exit (whatever is left in it killed first), and a group a dead worker left is removed
by the next. A process that goes over is killed, and the attempt ends out_of_memory with the
limit and the peak: final, since the same spec would go over again. Whatever the kind, the
training process's oom_score_adj is the highest, so the machine's own OOM killer picks it before
the API, the database or the worker. EPOCHAL_JOB_MEMORY_LIMIT=off turns it all off.
"""

from __future__ import annotations

import logging

from app.core.config import Settings
from app.domain.states import ErrorCode
from worker.protocol import Outcome
from worker.supervisor.memory_limit import cgroup_v1, cgroup_v2
from worker.supervisor.memory_limit.base import MemoryLimit, group_name, set_oom_score
from worker.supervisor.memory_limit.cgroup_v1 import CgroupV1
from worker.supervisor.memory_limit.cgroup_v2 import CgroupV2
from worker.supervisor.memory_limit.watchdog import Watchdog

__all__ = ["MemoryLimit", "Watchdog", "choose", "limit_for", "outcome", "start"]

log = logging.getLogger(__name__)
MIB = 2**20


def limit_for(settings: Settings, admitted: int | None) -> tuple[int, str] | None:
    """The limit in bytes and where it comes from (None: no limit, or no estimate to set it
    from: a job stored before estimates were kept)."""
    if settings.job_memory_limit == "off":
        return None
    if settings.fixed_job_memory_limit is not None:
        return settings.fixed_job_memory_limit, "EPOCHAL_JOB_MEMORY_LIMIT_BYTES"
    if admitted is None:
        return None
    margin = settings.job_memory_margin
    limit = int(admitted * (1 + margin))
    return limit, f"the admitted estimate, {admitted // MIB} MiB, plus {margin:.0%}"


def choose(settings: Settings, name: str, limit: int) -> MemoryLimit:
    """A cgroup v2 group, else a v1 group, where this worker may make one; else the watchdog."""
    if settings.job_memory_limit == "auto":
        for parent_of, kind in (
            (cgroup_v2.parent_group, CgroupV2),
            (cgroup_v1.parent_group, CgroupV1),
        ):
            parent = parent_of()
            if parent is None:
                continue
            try:
                return kind(parent, name, limit)
            except OSError:
                log.warning("could not make memory group %s under %s", name, parent, exc_info=True)
    return Watchdog(limit)


def start(
    settings: Settings, job_id: str, attempt: int, admitted: int | None, pid: int
) -> tuple[MemoryLimit, str] | None:
    """Put the attempt's training process `pid` under its limit; the limit and its source."""
    set_oom_score(pid)
    found = limit_for(settings, admitted)
    if found is None:
        return None
    limit, source = found
    enforced = choose(settings, group_name(job_id, attempt), limit)
    try:
        enforced.add(pid)
    except OSError:  # exited already, or the group refused it: the watchdog still can
        log.warning("could not move job %s's process into its group", job_id, exc_info=True)
        enforced.close()
        enforced = Watchdog(limit)
        enforced.add(pid)
    return enforced, source


def outcome(enforced: MemoryLimit, source: str) -> Outcome:
    """The attempt's end: over its limit, with the figures. Final: the same spec would go over
    again, so a retry would only spend another attempt."""
    peak = enforced.peak()
    seen = f"peak {peak // MIB} MiB" if peak is not None else "peak unknown"
    return Outcome.failure(
        ErrorCode.out_of_memory,
        f"the training process went over its memory limit and was killed: limit "
        f"{enforced.limit // MIB} MiB ({source}), {seen}, enforced by {enforced.kind}; "
        "use a smaller batch or model",
    )
