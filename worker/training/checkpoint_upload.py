"""A job's checkpoints and model in the artifact store (app.storage), written beside training.

The training thread stages each checkpoint on local disk (worker.training.checkpoint) and hands
it to `StoreCheckpoints.submit`, which returns at once: a thread of the job's own uploads it as
a checkpoint set (app.storage.checkpoint_sets: its parts with their sha256, the manifest last),
so the store's latest checkpoint, the newest set with a manifest, moves only once the whole set
is there, and the database's (the job's latest_checkpoint) only after it. At most one upload
is in flight. A checkpoint staged while one is still going waits in a single slot, and a
newer one takes its place there (only the newest pending checkpoint is kept: the local staging
stays bounded). A store that is down or throttling is retried with capped exponential backoff
and jitter for as long as training goes on; a newer checkpoint takes over from one still being
retried. After each set lands, older sets beyond the newest `keep`,
and prefixes left without a manifest (an upload that was given up or killed), are deleted.

A resumed attempt whose staging lacks the store's newest whole set downloads it first, each part
checked against its sha256; a set that fails is skipped for the one before it. At the attempt's
end the model, `model.onnx` and the model card are put under the keys the API's downloads read
(`<job id>/model/...`) before the job can be marked succeeded.

With the default store, the artifacts directory itself, the staging already is the store:
`for_job` answers None, and nothing is uploaded or written twice.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from app.core.config import Settings, get_settings
from app.domain.job_files import job_key
from app.storage.base import Store, StoreError, StoreUnavailable
from app.storage.checkpoint_sets import MANIFEST, CheckpointSets, Manifest
from app.storage.registry import get_store, is_artifacts_dir
from worker.training.checkpoint import (
    MANIFEST as STAGED_MANIFEST,
)
from worker.training.checkpoint import (
    checkpoint_dir_name,
    install,
    latest_epoch,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
FETCH_LOCK = ".fetch.lock"  # ranks of one machine take turns: one downloads, the others find it
FIRST_DELAY, MAX_DELAY = 0.5, 30.0  # the retries' backoff, in seconds


def checkpoints_key(job_id: str) -> str:
    """Where a job's checkpoint sets live in the store (as in the artifacts directory)."""
    return job_key(job_id, "checkpoints")


def model_key(job_id: str, name: str) -> str:
    """Where a job's model files live in the store: what app.api.routes.artifacts reads."""
    return job_key(job_id, "model", name)


class Backoff:
    """Capped exponential delays with jitter: each is drawn from the upper half of its step,
    so retries of many workers spread out and none comes back at once."""

    def __init__(self, first: float = FIRST_DELAY, cap: float = MAX_DELAY) -> None:
        self.first, self.cap, self.tries = first, cap, 0

    def next(self) -> float:
        step = min(self.cap, self.first * 2**self.tries)
        self.tries += 1
        return step / 2 + random.uniform(0, step / 2)  # noqa: S311 (timing, not secrets)


@dataclass(frozen=True)
class Staged:
    """A checkpoint staged on local disk, whole (sealed), waiting for the store."""

    folder: Path
    epoch: int
    step: int


def staged_parts(folder: Path) -> dict[str, Path]:
    """A staged checkpoint's files by their name in the set: all but the staging's manifest,
    which the set's own manifest (sha256 and all) replaces."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    parts = {p.relative_to(folder).as_posix(): p for p in files}
    parts.pop(STAGED_MANIFEST, None)
    return parts


class StoreCheckpoints:
    """One attempt's checkpoints in `store` under `<job_id>/checkpoints/`, staged in `staging`
    (worker.training.checkpoint.Publisher), and its model's upload at the end."""

    def __init__(
        self,
        store: Store,
        job_id: str,
        staging: Path,
        *,
        keep: int = 2,
        wait_seconds: float = 300.0,
        stop_wait_seconds: float = 10.0,
    ) -> None:
        self.store, self.job_id, self.staging, self.keep = store, job_id, staging, keep
        self.wait_seconds = wait_seconds  # at the start and at the end, for a store that is down
        self.stop_wait_seconds = stop_wait_seconds  # a stopped attempt's last upload, at most
        self.sets = CheckpointSets(store, checkpoints_key(job_id))
        self._cond = threading.Condition()
        self._pending: Staged | None = None
        self._current: Staged | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self.published: list[Manifest] = []  # every set this attempt put in the store, in order
        # Told of each set once its manifest is in the store, before older sets are pruned:
        # the main rank's child moves the job's latest checkpoint in the database with it.
        self.on_published: Callable[[Manifest], None] | None = None
        self.dropped: list[int] = []  # epochs of checkpoints given up for a newer one
        self.retries = 0  # failed tries (each retried after a backoff)
        self.upload_seconds = 0.0  # spent uploading, beside training

    # The training thread's side (worker.training.checkpoint.Publisher).

    def submit(self, folder: Path, epoch: int, step: int) -> None:
        with self._cond:
            if self._closed:
                return
            if self._pending is not None:  # never started: the newer one is all that matters
                self.dropped.append(self._pending.epoch)
            self._pending = Staged(folder, epoch, step)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"checkpoint-upload-{self.job_id}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def held(self) -> set[str]:
        with self._cond:
            return {s.folder.name for s in (self._current, self._pending) if s is not None}

    def fetch_newer(self, root: Path) -> None:
        """Download the store's newest whole set into `root` when `root` holds nothing as new
        (StoreUnavailable if the store stays down past wait_seconds: resuming from an older
        checkpoint than the store's would replay, and forget the rows of, epochs it holds)."""
        root.mkdir(parents=True, exist_ok=True)
        with open(root / FETCH_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            deadline = time.monotonic() + self.wait_seconds
            local = latest_epoch(root)
            manifests = self.retried(lambda: list(self.sets.manifests()), deadline, "list")
            for manifest in manifests:  # newest first
                if manifest.epoch <= local:
                    return
                if self.fetch(root, manifest, deadline) is not None:
                    return

    def fetch(self, root: Path, manifest: Manifest, deadline: float) -> Path | None:
        """Download the set into `root`, checked against its sha256, as its `latest`; the
        checkpoint's folder, or None if a part is missing or fails its checksum."""
        tmp = root / f".fetch-{manifest.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            got = self.retried(lambda: self.sets.download(manifest.name, tmp), deadline, "get")
            if got is None:
                log.warning("checkpoint %s in the store fails its checksums or lacks a part; "
                            "trying an older one", manifest.name)  # fmt: skip
                return None
            final = install(root, tmp, checkpoint_dir_name(manifest.epoch))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info(
            "took the checkpoint of epoch %d from the store (%s)", manifest.epoch, self.store.url
        )
        return final

    def drain(self, seconds: float) -> bool:
        """Wait up to `seconds` until no checkpoint is uploading or waiting; whether none is."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._pending is None and self._current is None, timeout=max(seconds, 0)
            )

    def close(self) -> None:
        """Stop taking checkpoints; one still uploading is left to the process's end."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def publish_model(self, folder: Path, names: Iterable[str], seconds: float) -> str | None:
        """Put the files `names` of `folder` (those that exist) under the job's model keys,
        retrying a store that is down for up to `seconds`; None once all are there, else why not.
        The framework's model file goes last: the API finds a model by it."""
        deadline = time.monotonic() + seconds
        for name in names:
            path = folder / name
            if not path.is_file():
                continue
            key = model_key(self.job_id, name)
            try:
                self.retried(lambda: self.store.put_file(key, path), deadline, "put")  # noqa: B023
            except StoreError as exc:
                return (
                    f"the artifact store ({self.store.url}) did not take {name} within "
                    f"{seconds:g} s (EPOCHAL_STORE_WAIT_SECONDS): {exc}; the attempt is retried "
                    "and resumes from its last checkpoint"
                )
        return None

    # The upload thread.

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._closed:
                    return
                self._current, self._pending = self._pending, None
            staged = self._current
            try:
                assert staged is not None
                self._upload(staged)
            except Exception:  # never the thread's end: the next checkpoint is tried all the same
                log.exception(
                    "uploading the checkpoint of epoch %s failed", staged and staged.epoch
                )
            finally:
                with self._cond:
                    self._current = None
                    self._cond.notify_all()

    def _upload(self, staged: Staged) -> None:
        """Upload until it lands, a newer checkpoint is waiting, or the attempt closes."""
        backoff = Backoff()
        while True:
            started = time.perf_counter()
            try:
                manifest = self.sets.write(staged.epoch, staged.step, staged_parts(staged.folder))
            except StoreError as exc:  # down, throttled, or refused: tried again after a pause
                self.retries += 1
                log.warning("checkpoint of epoch %d not uploaded (%s); retrying", staged.epoch, exc)
            except FileNotFoundError:  # its staging is gone (a resume rewrote it): nothing to do
                log.warning("checkpoint of epoch %d left its staging; not uploaded", staged.epoch)
                return
            else:
                self.published.append(manifest)
                log.info(
                    "checkpoint of epoch %d is in the store as %s", staged.epoch, manifest.name
                )
                self._point_at(manifest)
                self._prune(manifest.name)
                return
            finally:
                self.upload_seconds += time.perf_counter() - started
            with self._cond:
                delay = backoff.next()
                if self._cond.wait_for(lambda: self._pending is not None or self._closed, delay):
                    self.dropped.append(staged.epoch)
                    return  # a newer checkpoint (or the end): this one is not needed any more

    def _point_at(self, manifest: Manifest) -> None:
        if self.on_published is None:
            return
        try:
            self.on_published(manifest)
        except Exception:  # the database away or the job lost: the next set points again
            log.warning("the job's latest checkpoint not moved to %s", manifest.name, exc_info=True)

    def _prune(self, written: str) -> None:
        """Keep `written` and the newest `keep - 1` whole sets before it; the rest go: older
        ones, prefixes without a manifest, and any set after it (from an attempt that got
        further but whose rows this attempt, resumed before it, replaced)."""
        try:
            whole: dict[str, bool] = {}
            for info in self.store.list_objects(self.sets.root):
                name, _, part = info.key.removeprefix(self.sets.root).partition("/")
                if part:
                    whole[name] = whole.get(name, False) or part == MANIFEST
            older = [n for n in sorted(whole, reverse=True) if n < written and whole[n]]
            kept = {written, *older[: self.keep - 1]}
            for name in sorted(set(whole) - kept):
                self.sets.delete(name)
        except StoreError as exc:  # the next checkpoint prunes again, or the cleaner does
            log.warning("old checkpoints not pruned from the store: %s", exc)

    def retried(self, call: Callable[[], T], deadline: float, what: str) -> T:
        """`call()`, tried again after a backoff while the store is unavailable, until
        `deadline` (time.monotonic()); the last StoreUnavailable then."""
        backoff = Backoff()
        while True:
            try:
                return call()
            except StoreUnavailable as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                self.retries += 1
                log.warning("the artifact store is unavailable (%s: %s); retrying", what, exc)
                time.sleep(min(backoff.next(), left))


def preload() -> None:
    """Open the store's client ahead of a job (a warm training process): boto3 takes a while."""
    try:
        if not is_artifacts_dir(get_settings()):
            get_store()
    except Exception:  # the job's own attempt says what is wrong with the store
        log.debug("no store client ahead of the job", exc_info=True)


def for_job(
    job_id: str, workdir: Path, settings: Settings | None = None
) -> StoreCheckpoints | None:
    """The job's store checkpoints staged under `workdir` (its directory on this worker); None
    with the default store, where the staging is the store itself."""
    settings = settings or get_settings()
    if is_artifacts_dir(settings) and workdir.resolve() == settings.resolved_artifacts_dir / job_id:
        return None
    return StoreCheckpoints(
        get_store(),
        job_id,
        workdir / "checkpoints",
        wait_seconds=settings.store_wait_seconds,
        # A stopped attempt is re-queued: its newest checkpoint is worth the wait, within the
        # time its supervisor gives it before SIGTERM.
        stop_wait_seconds=min(settings.store_wait_seconds, settings.cancel_grace_seconds / 2),
    )
