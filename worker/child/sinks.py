"""The training side's only contact with the database: one metrics row per epoch, and the job's
latest checkpoint once a set's manifest is in the store.

The loop's logs are keyed by the row's fields already (app.schemas.metric_row); they are
written as they are.

Every write is fenced by attempt and retried through a database blip (a terminated session,
a restart), for at most a lease less a heartbeat: by then a supervisor that could not renew
either has stopped this process, and a write of ours that lands later changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.db import read_engine, retrying, session_scope
from app.domain import epoch_rows, sweeps
from app.domain.states import StopReason
from worker.training.callbacks import Callback, Logs, TrainState

T = TypeVar("T")


class LostOwnership(Exception):
    """Another attempt owns the job now (our lease expired); this one must stop writing."""


def _retried(action: Callable[[], T], what: str) -> T:
    settings = get_settings()
    return retrying(action, settings.lease_seconds - settings.heartbeat_seconds, what)


def _lost(job_id: str, attempt: int) -> LostOwnership:
    return LostOwnership(f"job {job_id} attempt {attempt} is no longer running here")


class DbMetricRecorder(Callback):
    """Commits the epoch's row before the next epoch starts (main rank only)."""

    def __init__(self, job_id: str, attempt: int) -> None:
        self.job_id, self.attempt = job_id, attempt
        self.seconds = 0.0  # spent writing rows (reported in the job's timings)

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        best = (state.best_epoch, state.best_value) if state.best_epoch else None
        started = time.perf_counter()
        owned = _retried(lambda: self._write(state.epoch, logs, best), f"epoch {state.epoch}")
        self.seconds += time.perf_counter() - started
        if not owned:
            raise _lost(self.job_id, self.attempt)

    def _write(self, epoch: int, row: Logs, best: tuple[int, float | None] | None) -> bool:
        with session_scope() as session:
            return epoch_rows.record_epoch(session, self.job_id, self.attempt, epoch, row, best)


class TrialPruning(Callback):
    """A sweep's trial: report each epoch's objective to Optuna as its row is written, and
    stop at the next epoch boundary when the pruner says so (stop reason `pruned`).

    An ordinary job pays one indexed read at the start; Optuna is imported only for a trial.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.reporter: object | None = None
        self.seconds = 0.0  # asking the pruner, a trial's epochs
        self.lookup_seconds = 0.0  # the read at the start, every job

    def on_train_begin(self, state: TrainState) -> None:
        started = time.perf_counter()
        trial = _retried(self._trial, "sweep trial")
        self.lookup_seconds = time.perf_counter() - started
        if trial is None:
            return
        from app.schemas.sweep import SweepSpec
        from app.services.sweep_study import TrialReporter

        spec = SweepSpec.model_validate_json(json.dumps(trial.spec))
        self.reporter = TrialReporter(trial.sweep_id, spec, trial.number)

    def _trial(self) -> sweeps.TrialOf | None:
        with session_scope() as session:
            return sweeps.trial_of(session, self.job_id)

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        if self.reporter is None:
            return
        started = time.perf_counter()
        prune = self.reporter.should_prune(state.epoch, logs, state.epochs)  # type: ignore[attr-defined]
        self.seconds += time.perf_counter() - started
        if prune:
            state.request_stop(StopReason.pruned, f"pruned by the sweep at epoch {state.epoch}")


def forget_epochs_after(job_id: str, attempt: int, epoch: int) -> int:
    """A resumed attempt redoes epochs after its checkpoint: their old rows go (P35)."""

    def forget() -> int | None:
        with session_scope() as session:
            return epoch_rows.drop_metrics_after(session, job_id, attempt, epoch)

    gone = _retried(forget, "forgetting replayed epochs")
    if gone is None:
        raise _lost(job_id, attempt)
    return gone


def point_at_checkpoint(job_id: str, attempt: int, name: str) -> None:
    """Move the job's latest checkpoint to the set `name`, whose manifest the store holds
    (worker.training.checkpoint_upload calls it from its upload thread)."""

    def point() -> bool:
        with session_scope() as session:
            return epoch_rows.record_checkpoint(session, job_id, attempt, name)

    if not _retried(point, "pointing at the latest checkpoint"):
        raise _lost(job_id, attempt)


def warm_connection() -> None:
    """In a warm child: connect, and run a job's first statements for a job id none has.

    Each statement matches no row and runs on its own (the read engine: no write lock held
    by a process at idle priority). The connection (kept, one per warm child) and the
    statements compiled are what a job's start and first row would otherwise pay. A database
    away now is met again, and retried, by the job.
    """
    with contextlib.suppress(DBAPIError), Session(read_engine()) as session:
        epoch_rows.record_epoch(session, "", 0, 0, {}, (1, None))
        epoch_rows.drop_metrics_after(session, "", 0, 0)
        sweeps.trial_of(session, "")
