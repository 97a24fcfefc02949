"""CPU time of a process group (the API's uvicorn master and workers) read from /proc, so a
load phase can be charged to the requests it served: CPU µs per request, by route."""

from __future__ import annotations

import os
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of the live processes whose process group is `pgid`."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # the process ended while we looked
            continue
        # After the command name in parentheses: state, ppid, pgrp, ..., utime (14), stime (15).
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


def busy_cpus(window: float) -> float:
    """How many CPUs' worth of work the whole machine did over the next `window` seconds."""

    def sample() -> tuple[int, int]:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all jiffies; idle + iowait

    total, idle = sample()
    time.sleep(window)
    total2, idle2 = sample()
    cpus = len(os.sched_getaffinity(0))
    return cpus * (1 - (idle2 - idle) / max(total2 - total, 1))


def wait_quiet(limit: float = 0.25, window: float = 0.5, timeout: float = 120.0) -> None:
    """Until the machine is nearly idle (a warm child's import done, a finished job's writes
    over), so the next timed run does not share it; at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while busy_cpus(window) > limit and time.monotonic() < deadline:
        pass
