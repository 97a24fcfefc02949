"""The training loop, once for both frameworks: it reads top to bottom.

Each epoch: set the rate, train over shuffled samples, validate over the whole split, hand a
dict of floats to the callbacks (early stopping, schedule, metrics row, checkpoint), keyed by
the metrics row's own fields (app.schemas.metric_row: `train_loss`, `val_accuracy`, …). Before
every epoch, and once after the last, all ranks agree on whether and why to stop: a cancel
signal reaches DDP ranks at slightly different moments, and a rank that left alone would leave
the others waiting in a collective (RELIABILITY.md P31).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from app.domain.states import StopReason
from app.schemas.metric_row import INPUT_MEASURES, score_field
from worker.training.backend import Backend
from worker.training.callbacks import Callback, Logs, TrainState

# Stop reasons in rising priority: when ranks disagree, the highest one wins everywhere. A
# preemption or a worker shutting down yields to all: the job ends as any other reason says,
# not re-queued.
STOP_REASONS = (
    StopReason.preempted,
    StopReason.shutdown,
    StopReason.early_stopping,
    StopReason.pruned,
    StopReason.cancelled,
    StopReason.timeout,
    StopReason.non_finite_loss,
)


@dataclass
class Fitted:
    """How fit ended, as every rank agreed it: the last logs and the stop reason (None: done)."""

    logs: Logs
    stop_reason: StopReason | None
    stop_detail: str | None


def fit(backend: Backend, state: TrainState, callbacks: Callback, validate: bool) -> Fitted:
    """Train epochs state.epoch+1 … state.epochs (a resumed state starts part-way)."""
    callbacks.on_train_begin(state)
    logs: Logs = {}
    while True:
        stopped = agree_on_stop(backend, state)
        if stopped or state.epoch >= state.epochs:
            break
        callbacks.on_epoch_begin(state)
        backend.set_learning_rate(state.learning_rate)
        started = time.perf_counter()
        trained = backend.train_epoch(state)
        if trained is None:  # cancel or timeout arrived mid-epoch: keep only finished epochs
            state.request_stop(state.interrupt or StopReason.cancelled)
            continue
        if trained.bad_step is not None:
            state.request_stop(
                StopReason.non_finite_loss,
                f"the loss became {trained.logs.get('loss')} at epoch {state.epoch + 1}, "
                f"step {trained.bad_step}; lower the learning rate or check the data",
            )
            continue
        train_seconds = time.perf_counter() - started
        state.epoch += 1
        logs = {score_field("train", k): v for k, v in trained.logs.items()}
        if validate:
            logs |= {score_field("val", k): v for k, v in backend.evaluate("val").items()}
        done = trained.samples if trained.trained_samples is None else trained.trained_samples
        logs |= {
            "learning_rate": state.learning_rate,
            "epoch_seconds": time.perf_counter() - started,
            "samples_per_second": done / train_seconds if train_seconds else math.nan,
        }
        for name in INPUT_MEASURES:  # a streamed epoch's: TrainedEpoch names them alike
            if (value := getattr(trained, name)) is not None:
                logs[name] = float(value)
        callbacks.on_epoch_end(state, logs)
    backend.end_training()  # the report and the export run without the training stream
    # The agreed reason is final: a signal arriving after the last agreement changes nothing.
    reason = state.stop_reason if stopped else None
    fitted = Fitted(logs, reason, state.stop_detail if reason else None)
    callbacks.on_train_end(state, logs)
    return fitted


def agree_on_stop(backend: Backend, state: TrainState) -> bool:
    """Every rank adopts the highest-priority stop any rank asked for (one collective)."""
    mine = 0
    if state.should_stop:
        reason = state.stop_reason if state.stop_reason in STOP_REASONS else StopReason.cancelled
        mine = STOP_REASONS.index(reason) + 1
    agreed = backend.agree(mine)
    if agreed == 0:
        return False
    reason = STOP_REASONS[agreed - 1]
    if state.stop_reason != reason:
        state.should_stop, state.stop_reason, state.stop_detail = True, reason, None
    return True


def agree_on_interrupt(backend: Backend, state: TrainState) -> bool:
    """Mid-epoch, every so many steps: whether any rank was interrupted (cancel, timeout,
    shutdown), on every rank; one that was not takes the highest-priority reason, so all
    leave the epoch at the same step and for the same reason."""
    mine = 0
    if state.interrupt is not None:
        reason = state.interrupt if state.interrupt in STOP_REASONS else StopReason.cancelled
        mine = STOP_REASONS.index(reason) + 1
    agreed = backend.agree(mine)
    if agreed and state.interrupt is None:
        state.interrupt = STOP_REASONS[agreed - 1]
    return agreed > 0
