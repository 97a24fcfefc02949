"""Checkpoints survive power cuts and torn writes: everything is fsynced before `latest` moves,
and a torn latest checkpoint is skipped for the one before it (a real PyTorch attempt). The
fsyncs run beside the next epoch, and a failure there is told to the loop at its next save."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from app.domain.job_files import latest_pointer
from tests.worker.training.inprocess import KillBefore, Killed, make_spec, run_spec
from tests.worker.training.test_checkpoint_share import FileBackend
from worker.protocol import DiskFull
from worker.training.callbacks import TrainState
from worker.training.checkpoint import MANIFEST, Checkpointer, latest_checkpoint, latest_epoch

pytestmark = pytest.mark.torch
FIELDS = {"dataset": {"name": "digits", "limit": 300}, "training": {"epochs": 5}}


def killed_run(workdir: Path, before: int) -> Path:
    """An attempt killed as epoch `before` starts; its checkpoints directory."""
    with pytest.raises(Killed):
        run_spec(make_spec("pytorch", **FIELDS), workdir, KillBefore(before))
    return workdir / "checkpoints"


def test_a_torn_latest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    root = killed_run(tmp_path, before=4)  # checkpoints of epochs 2 and 3, latest -> 3
    assert latest_epoch(root) == 3
    latest = latest_checkpoint(root)
    assert latest is not None and (latest / MANIFEST).is_file()
    biggest = max((p for p in latest.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with biggest.open("r+b") as f:  # what a power cut before the data reached the disk leaves
        f.truncate(biggest.stat().st_size // 2)
    assert latest_epoch(root) == 2
    resumed = run_spec(make_spec("pytorch", **FIELDS), tmp_path)
    assert [row["epoch"] for row in resumed.rows] == [3.0, 4.0, 5.0]  # from epoch 2's checkpoint
    assert resumed.outcome.status == "succeeded"


def test_files_and_directories_are_fsynced_before_latest_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append(("replace", f"{src} -> {dst}"))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    root = killed_run(tmp_path, before=2)  # one checkpoint: epoch 1
    monkeypatch.undo()
    moves = [i for i, (kind, what) in enumerate(events) if kind == "replace"]
    into_place = next(i for i in moves if events[i][1].endswith("/epoch-0001"))
    latest_moved = next(i for i in moves if events[i][1].endswith("/checkpoints/latest"))
    tmp_dir = events[into_place][1].split(" -> ")[0]
    synced_before = {what for kind, what in events[:into_place] if kind == "fsync"}
    files = [p for p in (root / "epoch-0001").rglob("*") if p.is_file()]
    assert files and all(
        str(p).replace(str(root / "epoch-0001"), tmp_dir) in synced_before for p in files
    )
    assert tmp_dir in synced_before  # the new directory's entries
    root_synced = [i for i, (kind, what) in enumerate(events) if what == str(root)]
    assert any(into_place < i < latest_moved for i in root_synced)  # the rename itself
    assert any(i > latest_moved for i in root_synced)  # and latest's


def any_backend() -> Any:
    return FileBackend()


def test_the_loop_goes_on_while_a_checkpoint_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, held, release = tmp_path / "checkpoints", threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_disk(fd: int) -> None:  # the sealing thread's fsyncs wait for the test
        if threading.current_thread() is not threading.main_thread():
            held.set()
            release.wait(60)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_disk)
    checkpointer = Checkpointer(root, any_backend(), every=1)
    checkpointer.on_epoch_end(TrainState(epochs=3, learning_rate=0.1, epoch=1), {})
    assert held.wait(60)  # the end of epoch 1 returned to the loop while its fsyncs wait
    assert not latest_pointer(root).exists() and latest_epoch(root) == 0
    release.set()
    checkpointer.wait()
    assert latest_epoch(root) == 1 and sorted(p.name for p in root.iterdir()) == [
        "epoch-0001",
        "latest",
    ]


def test_a_disk_that_fails_under_the_fsyncs_is_told_at_the_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "checkpoints"
    checkpointer = Checkpointer(root, any_backend(), every=1)
    checkpointer.save(TrainState(epochs=3, learning_rate=0.1, epoch=1))
    assert latest_epoch(root) == 1  # a plain save is durable and named on return

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    checkpointer.on_epoch_end(TrainState(epochs=3, learning_rate=0.1, epoch=2), {})
    sealing = checkpointer.sealing
    assert sealing is not None
    sealing.join()  # it failed on its thread; the loop has not heard yet
    monkeypatch.undo()
    with pytest.raises(DiskFull):
        checkpointer.on_epoch_end(TrainState(epochs=3, learning_rate=0.1, epoch=3), {})
    # What epoch 2 left is gone, `latest` still names epoch 1, and epoch 3 was never begun.
    assert sorted(p.name for p in root.iterdir()) == ["epoch-0001", "latest"]
    assert latest_epoch(root) == 1
