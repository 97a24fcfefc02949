"""A gang's checkpoints: each node keeps files of its own, so before a resume the newest whole
checkpoint any rank holds is sent to every rank that lacks it (over the back-end's
collectives), unpacked as plain files and made `latest` atomically, as one written here is."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import tarfile
from pathlib import Path

from app.domain.job_files import latest_pointer
from worker.training.backend import Backend
from worker.training.checkpoint import (
    LOOP_STATE,
    fsync_dir,
    fsync_file,
    whole_checkpoints,
    write_atomic,
)

log = logging.getLogger(__name__)
NOBODY = 1 << 30  # a rank number no gang reaches


def share_newest(root: Path, backend: Backend, rank: int) -> None:
    """A gang's nodes keep files of their own (a home each): the newest whole checkpoint any
    rank holds is sent to every rank that lacks it, so a re-queued gang resumes whole from
    its last rank 0's checkpoint, on whichever workers it formed on this time."""
    found = whole_checkpoints(root)
    mine = _epoch_of(found[0]) if found else 0
    newest = backend.agree(mine)
    if newest == 0 or -backend.agree(-mine) == newest:
        return  # nobody has one, or every rank has the newest already
    holder = -backend.agree(-(rank if mine == newest else NOBODY))  # the lowest rank with it
    payload = backend.broadcast(_pack(found[0]) if rank == holder else b"", holder)
    if mine < newest:
        _adopt(root, f"epoch-{newest:04d}", payload)
        log.info("took the checkpoint of epoch %d from rank %d", newest, holder)


def _epoch_of(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / LOOP_STATE).read_text())["epoch"])


def _pack(checkpoint: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(checkpoint, arcname=".")
    return buffer.getvalue()


def _adopt(root: Path, name: str, payload: bytes) -> None:
    """Unpack another rank's checkpoint as `name` and point `latest` at it, atomically."""
    root.mkdir(parents=True, exist_ok=True)
    tmp, final = root / f".tmp-{name}-{os.getpid()}", root / name
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r") as tar:
        tar.extractall(tmp, filter="data")  # plain files only, inside tmp
    if final.exists():  # another rank of this node took it first
        shutil.rmtree(tmp, ignore_errors=True)
    else:  # its manifest came along: fsync what it lists, as a checkpoint written here is
        for path in (p for p in tmp.rglob("*") if p.is_file()):
            fsync_file(path)
        fsync_dir(tmp)
        os.replace(tmp, final)
        fsync_dir(root)
    write_atomic(latest_pointer(root), name)
