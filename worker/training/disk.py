"""Telling a write that failed because the disk filled from any other failure.

Libraries do not all say ENOSPC: PyTorch's zip writer raises a RuntimeError ("unexpected
pos …") when its file cannot grow. So a failed write with hardly any space left where it
wrote counts as a full disk too, and becomes worker.protocol.DiskFull.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from worker.protocol import DiskFull, is_disk_full

FULL_BELOW_BYTES = 1 << 20  # less free than this after a failed write: the disk filled


def filled(exc: BaseException, folder: Path) -> bool:
    """Whether the write into `folder` that raised `exc` failed for want of space (ask
    before cleaning up, which frees what the write took)."""
    if is_disk_full(exc):
        return True
    try:
        return shutil.disk_usage(folder).free < FULL_BELOW_BYTES
    except OSError:
        return False


@contextmanager
def undone_if_full(folder: Path, undo: Callable[[], None]) -> Iterator[None]:
    """Writes into `folder`: when they fail because the disk filled, `undo()` (remove what is
    half written) and raise DiskFull; any other failure passes through untouched."""
    try:
        yield
    except Exception as exc:
        if not filled(exc, folder):
            raise
        undo()
        raise DiskFull(folder, exc) from exc
