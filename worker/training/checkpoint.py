"""Checkpoints a resumed attempt can continue from, written atomically.

A checkpoint is a directory `epoch-NNNN`: the back-end's model and optimizer files, the loop's
state as JSON (epoch, rate, callback states) and callbacks' arrays (best weights) as .npz. It
is written under a temporary name and renamed, and `latest` is replaced atomically, so a kill at
any moment leaves the previous checkpoint intact (RELIABILITY.md P32).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from worker.training.backend import Backend
from worker.training.callbacks import Callback, CallbackList, Logs, TrainState

LOOP_STATE = "loop.json"


class Checkpointer(Callback):
    """Saves every `every` epochs (main rank only) and can restore the latest."""

    def __init__(self, root: Path, backend: Backend, every: int, keep: int = 2) -> None:
        self.root, self.backend, self.every, self.keep = root, backend, every, keep
        self.callbacks: list[Callback] = []
        self.saved_epoch = 0
        self.seconds = 0.0  # spent writing checkpoints (reported in the job's timings)

    def watch(self, callbacks: CallbackList) -> None:
        """The callbacks whose state goes into each checkpoint."""
        self.callbacks = callbacks.stateful()

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        if state.epoch % self.every == 0 and not _stopped_badly(state):
            self.save(state)

    def save(self, state: TrainState) -> None:
        if not self.backend.is_main or state.epoch == 0 or state.epoch == self.saved_epoch:
            return
        started = time.perf_counter()
        self._write(state)
        self.seconds += time.perf_counter() - started

    def _write(self, state: TrainState) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"epoch-{state.epoch:04d}"
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        self.backend.save_checkpoint(tmp)
        for cb in self.callbacks:
            cb.save_arrays(tmp)
        (tmp / LOOP_STATE).write_text(json.dumps(self._loop_state(state)))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _write_atomic(self.root / "latest", final.name)
        self.saved_epoch = state.epoch
        self._prune(keep_name=final.name)

    def _loop_state(self, state: TrainState) -> dict[str, Any]:
        return {
            "epoch": state.epoch,
            "global_step": state.global_step,
            "learning_rate": state.learning_rate,
            "best_epoch": state.best_epoch,
            "best_value": state.best_value,
            "callbacks": {cb.state_key: cb.state_dict() for cb in self.callbacks},
        }

    def restore(self, state: TrainState) -> bool:
        """Load the latest checkpoint into the back-end, callbacks and state; False if none."""
        latest = latest_checkpoint(self.root)
        if latest is None:
            return False
        self.backend.load_checkpoint(latest)
        saved = json.loads((latest / LOOP_STATE).read_text())
        state.epoch, state.global_step = saved["epoch"], saved["global_step"]
        state.learning_rate = saved["learning_rate"]
        state.best_epoch, state.best_value = saved["best_epoch"], saved["best_value"]
        for cb in self.callbacks:
            cb.load_state_dict(saved["callbacks"].get(cb.state_key, {}))
            cb.load_arrays(latest)
        self.saved_epoch = state.epoch
        return True

    def _prune(self, keep_name: str) -> None:
        done = sorted(p for p in self.root.glob("epoch-*") if p.name != keep_name)
        for old in done[: max(len(done) - (self.keep - 1), 0)]:
            shutil.rmtree(old, ignore_errors=True)


def _stopped_badly(state: TrainState) -> bool:
    return state.stop_reason == "non_finite_loss"


def latest_checkpoint(root: Path) -> Path | None:
    """The directory `latest` names, if it is complete."""
    pointer = root / "latest"
    if not pointer.exists():
        return None
    path = root / pointer.read_text().strip()
    return path if (path / LOOP_STATE).exists() else None


def latest_epoch(root: Path) -> int:
    path = latest_checkpoint(root)
    return json.loads((path / LOOP_STATE).read_text())["epoch"] if path else 0


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
