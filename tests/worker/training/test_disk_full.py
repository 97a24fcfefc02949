"""A full disk under a checkpoint or the model, on a real 1 MiB tmpfs with PyTorch's own writers
(which say "unexpected pos", not ENOSPC): what the write left goes, `latest` still names the
last good checkpoint, no half-written model stays, and the child reports disk_full, final."""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.domain.job_files import JobFiles
from tests.helpers import small_tmpfs
from tests.worker.training.inprocess import EMPTY_DATA_DIR, backend_for, make_spec
from worker.child.attempt_outputs import finish
from worker.child.launch import classify
from worker.protocol import DiskFull
from worker.training.callbacks import TrainState
from worker.training.checkpoint import Checkpointer, whole_checkpoints
from worker.training.data import load_splits

pytestmark = pytest.mark.torch
# 64-1800-10 on digits, ~135k parameters: ~0.54 MB a checkpoint before the first step (Adam has
# no moments yet), so one fits in 1 MiB and a second does not.
SPEC = make_spec("pytorch", model={"hidden_units": [1800]}, training={"epochs": 3})


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", "1m") as folder:
        yield folder


def test_a_checkpoint_that_does_not_fit_keeps_the_last_good_one(disk: Path) -> None:
    root = disk / "checkpoints"
    with backend_for(SPEC) as backend:
        checkpointer = Checkpointer(root, backend, every=1)
        state = TrainState(epochs=3, learning_rate=0.001, epoch=1)
        checkpointer.save(state)
        state.epoch = 2
        with pytest.raises(DiskFull) as raised:
            checkpointer.save(state)
        assert raised.value.errno == errno.ENOSPC and "no space left" in str(raised.value)
        # Nothing half-written is left (the space is back), and epoch 1 is still the latest.
        assert sorted(path.name for path in root.iterdir()) == ["epoch-0001", "latest"]
        assert [path.name for path in whole_checkpoints(root)] == ["epoch-0001"]
        resumed = TrainState(epochs=3, learning_rate=0.001)
        assert checkpointer.restore(resumed) and resumed.epoch == 1
    outcome = classify(raised.value)
    assert (outcome.status, outcome.stop_reason, outcome.error_code) == (
        "failed",
        "disk_full",
        "disk_full",
    )
    assert not outcome.retryable and "last good checkpoint" in (outcome.error or "")


def test_a_model_that_does_not_fit_is_not_left_half_written(disk: Path) -> None:
    ballast = disk / "ballast"  # another job's files: 100 KB left, less than the model needs
    ballast.write_bytes(bytes(shutil.disk_usage(disk).free - 100_000))
    splits = load_splits(SPEC, EMPTY_DATA_DIR)
    with backend_for(SPEC) as backend, pytest.raises(DiskFull):
        state = TrainState(epochs=1, learning_rate=0.001, epoch=1)
        finish(SPEC, backend, splits, state, {}, 0.0, disk, {}, "job")
    assert not JobFiles(disk).model_dir.exists()
