"""The loop's stop agreement, with a scripted back-end standing in for the other ranks; the
loop's logs named as the metrics row is."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.domain.states import StopReason
from app.schemas.metric_row import METRIC_FIELDS
from worker.training.backend import TrainedEpoch
from worker.training.callbacks import Callback, CallbackList, Logs, TrainState
from worker.training.loop import STOP_REASONS, agree_on_interrupt, fit


def code(reason: str) -> int:
    """What a rank sends to say it stops for `reason` (0: it goes on)."""
    return STOP_REASONS.index(reason) + 1


class ScriptedBackend:
    """A back-end whose other rank asks to stop with `others[i]` at the i-th agreement."""

    is_main = True

    def __init__(self, others: list[int]) -> None:
        self.others, self.agreements, self.epochs_trained = others, 0, 0

    def agree(self, value: int) -> int:
        other = self.others[self.agreements] if self.agreements < len(self.others) else 0
        self.agreements += 1
        return max(value, other)

    def set_learning_rate(self, rate: float) -> None: ...

    def train_epoch(self, state: TrainState) -> TrainedEpoch | None:
        self.epochs_trained += 1
        return TrainedEpoch({"loss": 1.0, "accuracy": 0.5}, samples=10)

    def end_training(self) -> None: ...

    def evaluate(self, split: str) -> Logs:
        return {"loss": 2.0, "accuracy": 0.25}

    def predict(self, x: np.ndarray) -> np.ndarray:
        return x

    def get_weights(self) -> list[np.ndarray]:
        return []

    def set_weights(self, weights: list[np.ndarray]) -> None: ...
    def l2_penalty(self) -> float:
        return 0.0

    def parameter_count(self) -> int:
        return 0

    def topology(self) -> dict[str, int | str]:
        return {"replicas": 2, "strategy": "ddp"}

    def save_checkpoint(self, directory: Path) -> None: ...
    def load_checkpoint(self, directory: Path) -> None: ...
    def export_model(self, directory: Path) -> Path:
        return directory

    def close(self, exiting: bool = False) -> None: ...


def test_a_stop_asked_by_another_rank_stops_this_one_with_its_reason() -> None:
    backend = ScriptedBackend(others=[0, 0, code("timeout")])  # at the third agreement
    state = TrainState(epochs=10, learning_rate=0.1)
    fitted = fit(backend, state, CallbackList([]), validate=True)
    assert backend.epochs_trained == 2 and state.epoch == 2
    assert fitted.stop_reason == "timeout" and state.stop_reason == "timeout"


def test_an_interrupt_on_another_rank_mid_epoch_stops_this_one_with_its_reason() -> None:
    """A gang's node shutting down: the others leave the epoch at the same step, as shutdown
    (re-queued), not as a cancel."""
    backend = ScriptedBackend(others=[0, code("shutdown")])
    state = TrainState(epochs=10, learning_rate=0.1)
    assert not agree_on_interrupt(backend, state) and state.interrupt is None
    assert agree_on_interrupt(backend, state) and state.interrupt == "shutdown"
    state = TrainState(epochs=10, learning_rate=0.1, interrupt=StopReason.cancelled)
    assert agree_on_interrupt(ScriptedBackend(others=[0]), state)  # its own stops it too
    assert state.interrupt == "cancelled"


def test_the_highest_priority_reason_wins_when_ranks_disagree() -> None:
    backend = ScriptedBackend(others=[0, code("non_finite_loss")])  # elsewhere
    state = TrainState(epochs=10, learning_rate=0.1)
    state.request_stop("cancelled")  # this rank was cancelled before the first epoch
    fitted = fit(backend, state, CallbackList([]), validate=False)
    assert backend.epochs_trained == 0 and fitted.stop_reason == "cancelled"
    state2 = TrainState(epochs=10, learning_rate=0.1)

    class CancelAfterFirst(Callback):
        def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
            state.request_stop("cancelled")

    fitted = fit(
        ScriptedBackend(others=[0, code("non_finite_loss")]),
        state2,
        CancelAfterFirst(),
        validate=False,
    )
    assert fitted.stop_reason == "non_finite_loss"


def test_a_stop_after_the_last_agreement_does_not_change_how_it_ended() -> None:
    class LateCancel(Callback):
        def on_train_end(self, state: TrainState, logs: Logs) -> None:
            state.request_stop("cancelled")  # e.g. a signal during the final callbacks

    state = TrainState(epochs=2, learning_rate=0.1)
    fitted = fit(ScriptedBackend(others=[]), state, LateCancel(), validate=False)
    assert fitted.stop_reason is None and state.epoch == 2


def test_each_epoch_is_logged_by_the_metrics_rows_own_field_names() -> None:
    class Keep(Callback):
        def __init__(self) -> None:
            self.logs: list[Logs] = []

        def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
            self.logs.append(dict(logs))

    keep = Keep()
    fit(ScriptedBackend(others=[]), TrainState(epochs=1, learning_rate=0.1), keep, validate=True)
    (logs,) = keep.logs
    assert set(logs) <= set(METRIC_FIELDS)  # the sink writes them as they are
    assert (logs["train_loss"], logs["train_accuracy"]) == (1.0, 0.5)
    assert (logs["val_loss"], logs["val_accuracy"]) == (2.0, 0.25)
    assert logs["learning_rate"] == 0.1 and logs["samples_per_second"] > 0
