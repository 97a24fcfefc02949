"""The training loop, once for both frameworks: it reads top to bottom.

Each epoch: set the rate, train over shuffled samples, validate over the whole split, hand a
dict of floats to the callbacks (early stopping, schedule, metrics row, checkpoint), then let
every rank agree on whether to stop so none is left waiting in a collective.
"""

from __future__ import annotations

import math
import time

from worker.training.backend import Backend
from worker.training.callbacks import Callback, Logs, TrainState


def fit(backend: Backend, state: TrainState, callbacks: Callback, validate: bool) -> Logs:
    """Train epochs state.epoch+1 … state.epochs (a resumed state starts part-way)."""
    callbacks.on_train_begin(state)
    logs: Logs = {}
    while state.epoch < state.epochs and not state.should_stop:
        callbacks.on_epoch_begin(state)
        backend.set_learning_rate(state.learning_rate)
        started = time.perf_counter()
        trained = backend.train_epoch(state)
        if trained is None:  # cancel or timeout arrived mid-epoch: keep only finished epochs
            state.request_stop(state.interrupt or "cancelled")
            break
        if trained.bad_step is not None:
            state.request_stop(
                "non_finite_loss",
                f"the loss became {trained.logs.get('loss')} at epoch {state.epoch + 1}, "
                f"step {trained.bad_step}; lower the learning rate or check the data",
            )
            break
        train_seconds = time.perf_counter() - started
        state.epoch += 1
        logs = dict(trained.logs)
        if validate:
            logs |= {f"val_{k}": v for k, v in backend.evaluate("val").items()}
        logs |= {
            "learning_rate": state.learning_rate,
            "epoch_seconds": time.perf_counter() - started,
            "samples_per_second": trained.samples / train_seconds if train_seconds else math.nan,
        }
        callbacks.on_epoch_end(state, logs)
        state.should_stop = backend.any_rank(state.should_stop)
    callbacks.on_train_end(state, logs)
    return logs
