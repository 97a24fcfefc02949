"""Checkpoints a resumed attempt can continue from, written atomically.

A checkpoint is a directory `epoch-NNNN`: the back-end's model and optimizer files, the loop's
state as JSON (epoch, rate, callback states) and callbacks' arrays (best weights) as .npz. A
mid-epoch one (a streamed data set, `checkpoint_every_steps`) is `epoch-NNNN-step-SSSSSSSSS`,
taken in the epoch after NNNN at global step S; its loop state also holds the streamed epoch's
`mid_epoch` JSON (the reader's position and the epoch's sums so far). The names sort in the
order they were taken. It
is written under a temporary name and renamed, and `latest` is replaced atomically, so a kill at
any moment leaves the previous checkpoint intact (RELIABILITY.md P32). Every file, the new
directory and its parent are fsynced before `latest` moves, so a power cut cannot leave `latest`
naming files still in the page cache; a manifest of sizes lets a torn one be recognized, and
restoring falls back to the newest checkpoint that is whole.

With a store other than the artifacts directory, this directory is the checkpoints' local
staging: each one written here is handed to a publisher (worker.training.checkpoint_upload),
which uploads it beside training, and a resume first brings the store's newest whole set here.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from app.domain.job_files import latest_pointer
from app.domain.states import StopReason
from worker.training.backend import Backend
from worker.training.callbacks import Callback, CallbackList, Logs, TrainState
from worker.training.disk import undone_if_full

log = logging.getLogger(__name__)
LOOP_STATE = "loop.json"
MANIFEST = "manifest.json"  # written last: each file's size, so a torn checkpoint is seen


class Publisher(Protocol):
    """Where a checkpoint staged here goes next (worker.training.checkpoint_upload: a store)."""

    def submit(self, folder: Path, epoch: int, step: int) -> None:
        """Take a whole checkpoint just staged; return at once (it is uploaded aside)."""
        ...

    def held(self) -> set[str]:
        """Names of staged checkpoints it still reads (uploading, or waiting to): not pruned."""
        ...

    def fetch_newer(self, root: Path) -> None:
        """Bring the store's newest whole checkpoint into `root` if `root` has none as new."""
        ...


class Checkpointer(Callback):
    """Saves every `every` epochs (main rank only) and can restore the latest."""

    def __init__(
        self,
        root: Path,
        backend: Backend,
        every: int,
        keep: int = 2,
        publisher: Publisher | None = None,
        every_steps: int | None = None,
    ) -> None:
        self.root, self.backend, self.every, self.keep = root, backend, every, keep
        self.every_steps = every_steps
        self.publisher = publisher
        self.callbacks: list[Callback] = []
        self.saved_epoch = 0
        self.mid_epoch_of: int | None = None  # the finished epochs of the last mid-epoch one
        self.seconds = 0.0  # spent writing checkpoints (reported in the job's timings)

    def watch(self, callbacks: CallbackList) -> None:
        """The callbacks whose state goes into each checkpoint."""
        self.callbacks = callbacks.stateful()

    def on_train_begin(self, state: TrainState) -> None:
        if self.every_steps:
            state.step_checkpoint = self.save_step

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        if state.epoch % self.every == 0 and not _stopped_badly(state):
            self.save(state)

    def save_step(
        self, state: TrainState, mid_epoch: Callable[[], dict[str, Any]], now: bool = False
    ) -> None:
        """After a streamed step: every `every_steps` global steps (or `now`, at an interrupt),
        a mid-epoch checkpoint. Every rank calls this and `mid_epoch` (it may gather the
        ranks' sums); the main rank writes."""
        if not now and (not self.every_steps or state.global_step % self.every_steps):
            return
        partial = mid_epoch()
        if not self.backend.is_main:
            return
        started = time.perf_counter()
        name = f"{checkpoint_dir_name(state.epoch)}-step-{state.global_step:09d}"
        self._write(state, name, partial)
        self.mid_epoch_of = state.epoch
        self.seconds += time.perf_counter() - started

    def save(self, state: TrainState) -> None:
        if not self.backend.is_main or state.epoch == 0 or state.epoch == self.saved_epoch:
            return
        if self.mid_epoch_of == state.epoch:  # the weights are past this epoch's end: the
            return  # mid-epoch checkpoint after it is the one to resume from
        started = time.perf_counter()
        self._write(state, checkpoint_dir_name(state.epoch))
        self.saved_epoch = state.epoch
        self.seconds += time.perf_counter() - started

    def _write(self, state: TrainState, name: str, mid_epoch: dict[str, Any] | None = None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / name
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}"
        # A full disk: what this write left goes (the space with it), `latest` still names
        # the last good checkpoint, and the job ends disk_full.
        with undone_if_full(self.root, lambda: self._discard(tmp, final)):
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            self.backend.save_checkpoint(tmp)
            for cb in self.callbacks:
                cb.save_arrays(tmp)
            loop_state = self._loop_state(state) | ({"mid_epoch": mid_epoch} if mid_epoch else {})
            (tmp / LOOP_STATE).write_text(json.dumps(loop_state))
            _seal(tmp)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            fsync_dir(self.root)
            write_atomic(latest_pointer(self.root), final.name)
        if self.publisher is not None:  # uploaded aside: training goes on meanwhile
            self.publisher.submit(final, state.epoch, state.global_step)
        self._prune(keep_name=final.name)

    def _discard(self, tmp: Path, final: Path) -> None:
        """Remove a failed write's files: its temporary directory, the pointer's temporary
        file, and its checkpoint if `latest` never came to name it."""
        shutil.rmtree(tmp, ignore_errors=True)
        pointer = latest_pointer(self.root)
        _pointer_tmp(pointer).unlink(missing_ok=True)
        if not pointer.exists() or pointer.read_text().strip() != final.name:
            shutil.rmtree(final, ignore_errors=True)

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
        """Load the newest whole checkpoint into the back-end, callbacks and state; False if
        none (one that fails to load is skipped for the one before it). With a publisher, the
        store's newest whole checkpoint is brought here first when this staging has none as new
        (another worker's, or one written before this machine was used)."""
        if self.publisher is not None:
            self.publisher.fetch_newer(self.root)
        for candidate in whole_checkpoints(self.root):
            try:
                self.backend.load_checkpoint(candidate)
            except Exception:  # torn in a way the sizes did not show: the one before it
                log.warning("checkpoint %s does not load; trying an older one", candidate)
                continue
            self._load_state(candidate, state)
            return True
        return False

    def load(self, checkpoint: Path, state: TrainState) -> None:
        """Load exactly `checkpoint` (a gang's agreed one, worker.training.gang_resume): no
        fetch and no older one instead, so every rank resumes from the same checkpoint."""
        self.backend.load_checkpoint(checkpoint)
        self._load_state(checkpoint, state)

    def _load_state(self, latest: Path, state: TrainState) -> None:
        saved = json.loads((latest / LOOP_STATE).read_text())
        state.epoch, state.global_step = saved["epoch"], saved["global_step"]
        state.learning_rate = saved["learning_rate"]
        state.best_epoch, state.best_value = saved["best_epoch"], saved["best_value"]
        state.mid_epoch = saved.get("mid_epoch")
        for cb in self.callbacks:
            cb.load_state_dict(saved["callbacks"].get(cb.state_key, {}))
            cb.load_arrays(latest)
        self.saved_epoch = state.epoch

    def _prune(self, keep_name: str) -> None:
        held = self.publisher.held() if self.publisher is not None else set()
        done = sorted(p for p in self.root.glob("epoch-*") if p.name not in {keep_name, *held})
        for old in done[: max(len(done) - (self.keep - 1), 0)]:
            shutil.rmtree(old, ignore_errors=True)


def _stopped_badly(state: TrainState) -> bool:
    return state.stop_reason == StopReason.non_finite_loss


def latest_checkpoint(root: Path) -> Path | None:
    """The newest whole checkpoint: the one `latest` names, else the newest one before it."""
    return next(iter(whole_checkpoints(root)), None)


def whole_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints, newest first: the one `latest` names, then the older ones."""
    pointer = latest_pointer(root)
    named = root / pointer.read_text().strip() if pointer.exists() else None
    older = sorted(root.glob("epoch-*"), reverse=True) if root.is_dir() else []
    ordered = [named] if named is not None else []
    ordered += [p for p in older if p != named and (named is None or p.name < named.name)]
    return [path for path in ordered if _is_whole(path)]


def _is_whole(path: Path) -> bool:
    """Every file the manifest lists is there at its size, and the loop state parses."""
    try:
        manifest = path / MANIFEST
        if manifest.exists():  # checkpoints written before manifests existed have none
            sizes = json.loads(manifest.read_text())
            if any((path / name).stat().st_size != size for name, size in sizes.items()):
                return False
        json.loads((path / LOOP_STATE).read_text())["epoch"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def install(root: Path, tmp: Path, name: str) -> Path:
    """Make the checkpoint files in `tmp` (a folder under `root`) the checkpoint `name` and
    point `latest` at it: sealed (sizes manifest, fsynced) and renamed, as one written here is."""
    _seal(tmp)
    final = root / name
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    fsync_dir(root)
    write_atomic(latest_pointer(root), name)
    return final


def checkpoint_dir_name(epoch: int) -> str:
    """The folder of the checkpoint taken after `epoch`, in a staging directory."""
    return f"epoch-{epoch:04d}"


def latest_epoch(root: Path) -> int:
    path = latest_checkpoint(root)
    return json.loads((path / LOOP_STATE).read_text())["epoch"] if path else 0


def _seal(directory: Path) -> None:
    """fsync every file under `directory`, write the manifest of their sizes, fsync the dirs."""
    sizes = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        fsync_file(path)
        sizes[str(path.relative_to(directory))] = path.stat().st_size
    (directory / MANIFEST).write_text(json.dumps(sizes))
    fsync_file(directory / MANIFEST)
    for sub in sorted((p for p in directory.rglob("*") if p.is_dir()), reverse=True):
        fsync_dir(sub)
    fsync_dir(directory)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pointer_tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}")


def write_atomic(path: Path, text: str) -> None:
    tmp = _pointer_tmp(path)
    tmp.write_text(text)
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)
