"""The training side's only contact with the database: one metrics row per epoch."""

from __future__ import annotations

import json
import time

from app.core.db import session_scope
from app.domain import epoch_rows, sweeps
from app.domain.states import StopReason
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


class TrialPruning(Callback):
    """A sweep's trial: report each epoch's objective to Optuna as its row is written, and
    stop at the next epoch boundary when the pruner says so (stop reason `pruned`).

    An ordinary job pays one indexed read at the start; Optuna is imported only for a trial.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.reporter: object | None = None
        self.seconds = 0.0

    def on_train_begin(self, state: TrainState) -> None:
        with session_scope() as session:
            trial = sweeps.trial_of(session, self.job_id)
        if trial is None:
            return
        from app.schemas.sweep import SweepSpec
        from app.services.sweep_study import TrialReporter

        spec = SweepSpec.model_validate_json(json.dumps(trial.spec))
        self.reporter = TrialReporter(trial.sweep_id, spec, trial.number)

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        if self.reporter is None:
            return
        row = {column: logs[key] for key, column in ROW_FIELDS.items() if key in logs}
        started = time.perf_counter()
        prune = self.reporter.should_prune(state.epoch, row, state.epochs)  # type: ignore[attr-defined]
        self.seconds += time.perf_counter() - started
        if prune:
            state.request_stop(StopReason.pruned, f"pruned by the sweep at epoch {state.epoch}")


def forget_epochs_after(job_id: str, epoch: int) -> int:
    """A resumed attempt redoes epochs after its checkpoint: their old rows go (P35)."""
    with session_scope() as session:
        return epoch_rows.drop_metrics_after(session, job_id, epoch)
