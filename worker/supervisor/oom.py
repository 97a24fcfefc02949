"""Was the child killed by the kernel's OOM killer? The evidence a supervisor can gather.

A SIGKILL the supervisor did not send is the OOM killer's signature, but an operator's `kill -9`
looks the same, so the answer rests on evidence: the cgroup's oom_kill counter rose during the
attempt, or the child's peak resident memory (sampled while it ran) came near what was
available when it started. Either way the job ends out_of_memory, which a retry cannot fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.domain.states import ErrorCode
from worker.protocol import Outcome

NEAR_LIMIT = 0.75  # of the memory available at the start: the child was in OOM territory
OOM_EVENTS = (
    Path("/sys/fs/cgroup/memory.events"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.oom_control"),  # cgroup v1
)
CGROUP_LIMITS = (
    (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
    (
        Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        Path("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ),
)


def _field(path: Path, name: str, scale: int = 1) -> int | None:
    """The integer after `name` on its line of a "name value" file, or None."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[0] == name and parts[1].isdigit():
            return int(parts[1]) * scale
    return None


def oom_kills() -> int | None:
    """The cgroup's count of OOM kills so far, where the kernel exposes it."""
    for path in OOM_EVENTS:
        count = _field(path, "oom_kill")
        if count is not None:
            return count
    return None


def memory_available() -> int | None:
    """Memory a new allocation could still get: MemAvailable, or less under a cgroup limit."""
    found = [_field(Path("/proc/meminfo"), "MemAvailable", 1024)]
    for limit_file, usage_file in CGROUP_LIMITS:
        try:
            limit, usage = int(limit_file.read_text()), int(usage_file.read_text())
        except (OSError, ValueError):  # "max" (no limit) or no such cgroup
            continue
        found.append(max(0, limit - usage))
    known = [n for n in found if n is not None]
    return min(known) if known else None


def peak_rss(pid: int) -> int | None:
    """The process's peak resident memory so far (VmHWM), or None once it is gone."""
    return _field(Path(f"/proc/{pid}/status"), "VmHWM", 1024)


@dataclass
class MemoryWatch:
    """What one attempt's OOM verdict rests on, gathered from its start to its end."""

    oom_kills_at_start: int | None = field(default_factory=oom_kills)
    available_at_start: int | None = field(default_factory=memory_available)
    peak_rss: int = 0

    def sample(self, pid: int) -> None:
        """Note the child's peak resident memory (called while it runs)."""
        self.peak_rss = max(self.peak_rss, peak_rss(pid) or 0)

    def killed_by_oom(self) -> bool:
        """Evidence that an unexplained SIGKILL came from the OOM killer."""
        now = oom_kills()
        if (
            now is not None
            and self.oom_kills_at_start is not None
            and now > self.oom_kills_at_start
        ):
            return True
        return bool(self.available_at_start) and self.peak_rss >= NEAR_LIMIT * (
            self.available_at_start or 0
        )

    def outcome(self) -> Outcome:
        """The final failure of an OOM-killed child: the same spec here would meet it again."""
        return Outcome.failure(
            ErrorCode.out_of_memory,
            "the training process was killed (signal SIGKILL) by the kernel's out-of-memory "
            f"killer (peak resident memory {self.peak_rss // 2**20} MiB); see the log",
        )
