"""Checkpoints survive power cuts and torn writes: everything is fsynced before `latest` moves,
and a torn latest checkpoint is skipped for the one before it (a real PyTorch attempt)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.worker.training.inprocess import KillBefore, Killed, make_spec, run_spec
from worker.training.checkpoint import MANIFEST, latest_checkpoint, latest_epoch

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
