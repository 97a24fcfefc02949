"""Printing results: a readable table and machine-readable `BENCH name value unit` lines."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field


@dataclass
class Report:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, name: str, value: float, unit: str, note: str = "") -> None:
        self.rows.append((name, f"{value:.4g}", unit, note))
        print(f"BENCH {name} {value:.6g} {unit}", flush=True)

    def table(self, title: str) -> str:
        width = max((len(r[0]) for r in self.rows), default=10)
        lines = [title, "-" * len(title)]
        lines += [f"{n:<{width}}  {v:>10} {u:<8} {note}" for n, v, u, note in self.rows]
        return "\n".join(lines)


def machine() -> str:
    """Cores and memory of this machine, for the header of every result."""
    mem_kb = 0
    try:
        with open("/proc/meminfo") as f:
            mem_kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    except (OSError, StopIteration):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({cpu}), {mem_kb / 1024 / 1024:.1f} GiB RAM, Python {platform.python_version()}"
