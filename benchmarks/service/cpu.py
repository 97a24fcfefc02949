"""CPU time of a process group (the API's uvicorn master and workers) read from /proc, so a
load phase can be charged to the requests it served: CPU µs per request, by route."""

from __future__ import annotations

import os
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
