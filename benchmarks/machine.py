"""The machine a result came from: every benchmark prints it first."""

from __future__ import annotations

import os
import platform
from importlib import metadata


def _first(path: str, prefix: str) -> str | None:
    try:
        with open(path) as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith(prefix))
    except (OSError, StopIteration):
        return None


def describe() -> str:
    """Cores, CPU model, memory, Python and framework versions, on one line."""
    cpu = _first("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()
    mem_kb = (_first("/proc/meminfo", "MemTotal") or "0 kB").split()[0]
    versions = []
    for package in ("torch", "tensorflow-cpu", "tensorflow", "keras"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    return (
        f"{os.cpu_count()} cores ({cpu}), {int(mem_kb) / 2**20:.1f} GiB RAM, "
        f"Python {platform.python_version()}, {', '.join(versions)}"
    )
