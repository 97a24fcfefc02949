"""The epoch's step progress: both back-ends note their steps as an epoch goes, and the child's
writer turns the latest note into the progress file the supervisor reads (worker.protocol)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.domain.job_files import JobFiles
from app.schemas.api import StepProgress
from tests.helpers import scaled, wait_until
from tests.worker.training.inprocess import backend_for, make_spec
from worker.child.progress import writing_progress
from worker.protocol import read_progress
from worker.training.callbacks import TrainState


@dataclass
class Noting(TrainState):
    """A TrainState that keeps every note a back-end made."""

    notes: list[tuple[int, int, int]] = field(default_factory=list)

    def steps_done(self, step: int, steps: int) -> None:
        super().steps_done(step, steps)
        assert self.step_progress is not None
        self.notes.append(self.step_progress)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_each_back_end_notes_its_steps_as_the_epoch_goes(framework: str) -> None:
    # batch 8: ~200 steps, so TensorFlow's compiled chunks of 64 steps note a few times too
    spec = make_spec(framework, training={"epochs": 2, "batch_size": 8})
    state = Noting(epochs=2, learning_rate=0.01)
    with backend_for(spec) as backend:
        assert backend.train_epoch(state) is not None
    epochs, done, totals = zip(*state.notes, strict=True)
    steps = totals[0]
    assert set(epochs) == {1} and set(totals) == {steps} and steps > 128
    assert len(done) >= 3 and list(done) == sorted(set(done)) and done[-1] == steps


def test_the_writer_follows_the_latest_note(tmp_path: Path) -> None:
    state, files = TrainState(epochs=3, learning_rate=0.1), JobFiles(tmp_path)
    with writing_progress(state, files, attempt=2):
        assert read_progress(files, 2) is None  # nothing noted, nothing written
        state.steps_done(5, 40)
        expected = StepProgress(epoch=1, step=5, steps=40)
        wait_until(lambda: read_progress(files, 2) == expected, scaled(10), "step 5")
        state.epoch = 1  # the first epoch ended; the second goes
        state.steps_done(3, 40)
        expected = StepProgress(epoch=2, step=3, steps=40)
        wait_until(lambda: read_progress(files, 2) == expected, scaled(10), "epoch 2 step 3")
    assert read_progress(files, 1) is None  # another attempt's file is another file
