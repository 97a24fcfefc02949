"""The training side's only contact with the database: one metrics row per epoch."""

from __future__ import annotations

import time

from app.core.db import session_scope
from app.domain import epoch_rows
from worker.training.callbacks import Callback, Logs, TrainState

ROW_FIELDS = {
    "loss": "train_loss",
    "accuracy": "train_accuracy",
    "mae": "train_mae",
    "val_loss": "val_loss",
    "val_accuracy": "val_accuracy",
    "val_mae": "val_mae",
    "learning_rate": "learning_rate",
    "epoch_seconds": "epoch_seconds",
    "samples_per_second": "samples_per_second",
}


class LostOwnership(Exception):
    """Another attempt owns the job now (our lease expired); this one must stop writing."""


class DbMetricRecorder(Callback):
    """Commits the epoch's row before the next epoch starts (main rank only)."""

    def __init__(self, job_id: str, attempt: int) -> None:
        self.job_id, self.attempt = job_id, attempt
        self.seconds = 0.0  # spent writing rows (reported in the job's timings)

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        row = {column: logs[key] for key, column in ROW_FIELDS.items() if key in logs}
        best = (state.best_epoch, state.best_value) if state.best_epoch else None
        started = time.perf_counter()
        with session_scope() as session:
            owned = epoch_rows.record_epoch(
                session, self.job_id, self.attempt, state.epoch, row, best
            )
        self.seconds += time.perf_counter() - started
        if not owned:
            raise LostOwnership(
                f"job {self.job_id} attempt {self.attempt} is no longer running here"
            )


def forget_epochs_after(job_id: str, epoch: int) -> int:
    """A resumed attempt redoes epochs after its checkpoint: their old rows go (P35)."""
    with session_scope() as session:
        return epoch_rows.drop_metrics_after(session, job_id, epoch)
