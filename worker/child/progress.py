"""The epoch's step progress, written for the supervisor while the attempt trains.

The back-ends note each step on the TrainState (TrainState.steps_done: an attribute, no I/O);
a thread of the main rank turns the latest note into the attempt's progress file at most every
PROGRESS_SECONDS (worker.protocol), which the supervisor's lease renewals carry to the job row.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app.domain.job_files import JobFiles
from app.schemas.api import StepProgress
from worker.protocol import PROGRESS_SECONDS, write_progress
from worker.training.callbacks import TrainState

log = logging.getLogger("epochal.child")


class ProgressWriter(threading.Thread):
    """Writes state.step_progress to the attempt's progress file when it moved."""

    def __init__(self, state: TrainState, files: JobFiles, attempt: int) -> None:
        super().__init__(name="step-progress", daemon=True)
        self.state, self.files, self.attempt = state, files, attempt
        self._stopped = threading.Event()

    def run(self) -> None:
        written: tuple[int, int, int] | None = None
        while not self._stopped.wait(PROGRESS_SECONDS):
            noted = self.state.step_progress
            if noted is None or noted == written:
                continue
            epoch, step, steps = noted
            try:
                write_progress(
                    self.files, self.attempt, StepProgress(epoch=epoch, step=step, steps=steps)
                )
            except OSError as exc:  # a full disk: the training's own writes say so, not this
                log.debug("could not write the step progress: %s", exc)
                continue
            written = noted

    def stop(self) -> None:
        self._stopped.set()


@contextmanager
def writing_progress(state: TrainState, files: JobFiles, attempt: int) -> Iterator[None]:
    """The progress file follows the state's notes for as long as the block runs."""
    writer = ProgressWriter(state, files, attempt)
    writer.start()
    try:
        yield
    finally:
        writer.stop()
