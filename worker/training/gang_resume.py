"""A gang's resume: every rank loads the same checkpoint, and each takes it from the store or
finds it on its own disk. Nothing of a checkpoint travels over the collectives.

Rank 0 names a candidate as two numbers over `Backend.agree` (its epoch and step): the newest
whole checkpoint set in the job's store, or, while the store has none (a job that continues
another copies its parent's checkpoint in on each node) or where the job's store is the
artifacts directory itself, its newest whole local checkpoint. Every rank then takes that
checkpoint: a local copy whose files match the set's sha256 (one it staged or fetched before:
the local-disk cache), else the set downloaded and checked against its manifest. When any rank
could not, rank 0 names the one before it; when none is left, every rank starts over together.
So nodes whose artifacts directories are their own, with no store between them, share no
checkpoint: a gang resumes across machines through a store (EPOCHAL_STORE_URL).
"""

from __future__ import annotations

import fcntl
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.domain.job_files import latest_pointer
from app.storage.checkpoint_sets import Manifest, checkpoint_name, file_sha256
from worker.training.backend import Backend
from worker.training.callbacks import TrainState
from worker.training.checkpoint import LOOP_STATE, Checkpointer, whole_checkpoints, write_atomic
from worker.training.checkpoint_upload import FETCH_LOCK, StoreCheckpoints, staged_parts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """A checkpoint as the ranks name it: the loop's epoch and global step when it was taken."""

    epoch: int
    step: int


def resume(
    checkpointer: Checkpointer, state: TrainState, store: StoreCheckpoints | None, gang: bool
) -> bool:
    """Restore the newest checkpoint (Checkpointer.restore); a gang's ranks the one they agree
    on, or none at all. Whether one was loaded."""
    if not gang:
        return checkpointer.restore(state)
    agreed = agree_on_checkpoint(checkpointer.root, checkpointer.backend, store)
    if agreed is not None:
        checkpointer.load(agreed, state)
    return agreed is not None


def agree_on_checkpoint(
    root: Path, backend: Backend, store: StoreCheckpoints | None
) -> Path | None:
    """The checkpoint every rank resumes from, in `root` (this rank's staging) and named by its
    `latest`; None when the ranks share none, and every rank starts over."""
    offered = _candidates(root, store) if backend.is_main else iter(())
    while True:
        mine = next(offered, None)
        # Every other rank says 0, so the largest value is rank 0's (epochs and steps are >= 0).
        named = backend.agree(mine.epoch + 1 if mine else 0)
        if named == 0:
            return None
        wanted = Candidate(named - 1, backend.agree(mine.step if mine else 0))
        found = take(root, wanted, store)
        if backend.agree(0 if found else 1) == 0 and found is not None:  # every rank has it
            return found
        log.warning("a rank lacks the checkpoint of epoch %d (step %d); trying an older one",
                    wanted.epoch, wanted.step)  # fmt: skip


def _candidates(root: Path, store: StoreCheckpoints | None) -> Iterator[Candidate]:
    """Rank 0's offers, newest first: the store's whole sets, else its own local checkpoints."""
    sets: list[Manifest] = []
    if store is not None:
        deadline = time.monotonic() + store.wait_seconds
        sets = store.retried(lambda: list(store.sets.manifests()), deadline, "list")
    if sets:
        yield from (Candidate(m.epoch, m.step) for m in sets)
        return
    for folder in whole_checkpoints(root):
        yield _taken_at(folder)


def take(root: Path, wanted: Candidate, store: StoreCheckpoints | None) -> Path | None:
    """`wanted` in `root`, as its `latest`: a local copy (checked against the store's manifest
    where the store has one), else downloaded from the store; None if neither has it."""
    if store is None:
        return _named_latest(root, _local(root, wanted, None))
    root.mkdir(parents=True, exist_ok=True)
    with open(root / FETCH_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # ranks of one machine take turns: one downloads
        deadline = time.monotonic() + store.wait_seconds
        name = checkpoint_name(wanted.epoch, wanted.step)
        manifest = store.retried(lambda: store.sets.manifest(name), deadline, "get")
        local = _local(root, wanted, manifest)
        if local is not None or manifest is None:
            return _named_latest(root, local)
        return store.fetch(root, manifest, deadline)


def _local(root: Path, wanted: Candidate, manifest: Manifest | None) -> Path | None:
    """A whole local checkpoint taken at `wanted`, whose files are the manifest's (if any)."""
    for folder in whole_checkpoints(root):
        if _taken_at(folder) == wanted and (manifest is None or matches(folder, manifest)):
            return folder
    return None


def matches(folder: Path, manifest: Manifest) -> bool:
    """Whether the staged checkpoint in `folder` holds exactly the set's parts, byte for byte
    (each one's size and sha256)."""
    parts = staged_parts(folder)
    if set(parts) != {entry.name for entry in manifest.parts}:
        return False
    return all(
        parts[e.name].stat().st_size == e.size and file_sha256(parts[e.name]) == e.sha256
        for e in manifest.parts
    )


def _taken_at(folder: Path) -> Candidate:
    saved = json.loads((folder / LOOP_STATE).read_text())
    return Candidate(int(saved["epoch"]), int(saved["global_step"]))


def _named_latest(root: Path, folder: Path | None) -> Path | None:
    """Point `latest` at `folder` unless it names it already (a folder every node shares is
    left as it is)."""
    if folder is not None:
        pointer = latest_pointer(root)
        if not pointer.exists() or pointer.read_text().strip() != folder.name:
            write_atomic(pointer, folder.name)
    return folder
