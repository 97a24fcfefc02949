"""One attempt of one job, in the training process: data, back-end, callbacks, fit, result
(the exports and the final result: worker.child.attempt_outputs).

`train` is what worker.child.launch calls: it adds the database's part (the metrics row, forgetting
rows of epochs a resumed attempt replays) and the supervisor's (the epoch's step progress,
worker.child.progress) to `run_attempt`, which is the whole attempt without a database, so
tests and benchmarks run exactly this code in-process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

from app.domain.job_files import JobFiles
from app.domain.states import ErrorCode, JobStatus, StopReason
from app.schemas.job_spec import JobSpec
from app.schemas.metric_row import best_field
from app.schemas.monitor import resolved_mode
from worker.child.attempt_outputs import finish, phase, publish_model
from worker.child.progress import writing_progress
from worker.child.sinks import (
    DbMetricRecorder,
    TrialPruning,
    forget_epochs_after,
    point_at_checkpoint,
)
from worker.protocol import Outcome
from worker.training.backend import Backend, Placement, create_backend
from worker.training.callbacks import BestEpoch, Callback, CallbackList, Monitor, TrainState
from worker.training.checkpoint import Checkpointer
from worker.training.checkpoint_upload import StoreCheckpoints, for_job
from worker.training.data import DataError, Splits, load_splits
from worker.training.early_stopping import EarlyStopping
from worker.training.gang_resume import resume
from worker.training.input_bottleneck import InputBottleneck
from worker.training.loop import fit
from worker.training.model_card import ExportError
from worker.training.schedules import LRSchedule
from worker.training.warm_start import adopt_parent_checkpoint, load_init

log = logging.getLogger("epochal.child")


def best_monitor(spec: JobSpec, validate: bool) -> Monitor:
    """Early stopping's monitor when there is one, else val_loss (train_loss without a split)."""
    es = spec.early_stopping
    if es is not None:
        return Monitor(es.monitor, resolved_mode(es.monitor, es.mode), es.min_delta)
    return Monitor(best_field(None, validate), "min")


def build_callbacks(
    spec: JobSpec, backend: Backend, monitor: Monitor, record: Sequence[Callback] = ()
) -> list[Callback]:
    """In order: schedule, best epoch, early stopping, then `record` (main rank only)."""
    callbacks: list[Callback] = [
        LRSchedule(spec.lr_scheduler, spec.optimizer.learning_rate),
        BestEpoch(monitor),
    ]
    es = spec.early_stopping
    if es is not None:
        callbacks.append(
            EarlyStopping(
                monitor,
                es.patience,
                baseline=es.baseline,
                start_from_epoch=es.start_from_epoch,
                restore_best_weights=es.restore_best_weights,
                get_weights=backend.get_weights,
                set_weights=backend.set_weights,
            )
        )
    return callbacks + list(record)


class ForgetReplayedEpochs(Callback):
    """A resumed attempt redoes the epochs after its checkpoint: their old rows go (P35)."""

    def __init__(self, job_id: str, attempt: int) -> None:
        self.job_id, self.attempt = job_id, attempt
        self.seconds = 0.0  # the child's first statement: its connection is opened here

    def on_train_begin(self, state: TrainState) -> None:
        started = time.perf_counter()
        forget_epochs_after(self.job_id, self.attempt, state.epoch)
        self.seconds += time.perf_counter() - started


def train(
    spec: JobSpec,
    job_id: str,
    attempt: int,
    workdir: Path,
    placement: Placement,
    state: TrainState,
    data_dir: Path,
    timings: dict[str, float] | None = None,
) -> Outcome:
    """Run (or resume) the attempt; returns what the supervisor should record."""
    timings = {} if timings is None else timings
    with phase(timings, "data_s"):
        try:
            splits = load_splits(spec, data_dir)
        except DataError as exc:
            return Outcome.failure(ErrorCode.invalid_data, str(exc))
    with phase(timings, "build_s"):
        backend = create_backend(spec, splits, placement)
    record: list[Callback] = []
    # Only the main rank reports: global rank 0, on a gang's node 0, whose files are the job's.
    progress = (
        writing_progress(state, JobFiles(workdir), attempt) if backend.is_main else nullcontext()
    )
    if backend.is_main:
        forget, rows = ForgetReplayedEpochs(job_id, attempt), DbMetricRecorder(job_id, attempt)
        pruning = TrialPruning(job_id)
        record = [forget, rows, pruning]
    store = for_job(job_id, workdir)  # None with the default store: the staging is the store
    if store is not None and backend.is_main:
        store.on_published = lambda manifest: point_at_checkpoint(job_id, attempt, manifest.name)
    try:
        with progress:
            gang = placement.replicas > spec.resources.replica_count  # nodes of their own
            outcome = run_attempt(
                spec, workdir, backend, splits, state, record, timings, job_id, store, gang
            )
    finally:
        backend.close(exiting=True)  # this process ends with the attempt (worker.child.launch)
    if backend.is_main and outcome.result:
        # Every statement fit runs: the rows, and before the first epoch the replayed epochs'
        # rows gone and the sweep trial looked up (the first opens this process's connection).
        db_s = forget.seconds + rows.seconds + pruning.lookup_seconds
        outcome.result["timings"]["db_write_s"] = round(db_s, 4)
        if pruning.reporter is not None:
            outcome.result["timings"]["prune_s"] = round(pruning.seconds, 4)
    return outcome


def run_attempt(
    spec: JobSpec,
    workdir: Path,
    backend: Backend,
    splits: Splits,
    state: TrainState,
    record: Sequence[Callback] = (),
    timings: dict[str, float] | None = None,
    job_id: str | None = None,
    store: StoreCheckpoints | None = None,
    gang: bool = False,
) -> Outcome:
    """Resume from the latest checkpoint in workdir if any, fit, then checkpoint and export
    (the framework's model file, model.onnx and model-card.json, named for job_id). With a
    store, checkpoints are uploaded beside training and the model is put there before the
    attempt can succeed; a resume first brings the store's newest checkpoint into workdir.
    A gang's ranks (nodes of their own) resume from the checkpoint they agree on."""
    try:
        return _run_attempt(
            spec, workdir, backend, splits, state, record, timings, job_id, store, gang
        )
    finally:
        if store is not None:
            store.close()


def _run_attempt(
    spec: JobSpec,
    workdir: Path,
    backend: Backend,
    splits: Splits,
    state: TrainState,
    record: Sequence[Callback],
    timings: dict[str, float] | None,
    job_id: str | None,
    store: StoreCheckpoints | None,
    gang: bool,
) -> Outcome:
    timings = {} if timings is None else timings
    validate = splits.has_val
    callbacks = CallbackList(build_callbacks(spec, backend, best_monitor(spec, validate), record))
    files = JobFiles(workdir)
    checkpointer = Checkpointer(
        files.checkpoints,
        backend,
        spec.checkpoint_every_epochs,
        publisher=store,
        every_steps=spec.checkpoint_every_steps if splits.stream else None,
    )
    input_watch = InputBottleneck()
    callbacks.callbacks += [input_watch, checkpointer]
    checkpointer.watch(callbacks)
    if why := adopt_parent_checkpoint(spec, workdir):  # a job that continues another
        return Outcome.failure(ErrorCode.invalid_config, why)
    if resume(checkpointer, state, store, gang):
        log.info("resuming from the checkpoint of epoch %d", state.epoch)
    elif why := load_init(spec, backend, splits, workdir):  # a fresh start from another job
        return Outcome.failure(ErrorCode.invalid_config, why)
    if backend.agree(state.epoch) != -backend.agree(-state.epoch):  # ranks would not match up
        raise RuntimeError("the ranks resumed from different epochs; no rank trains alone")
    started = time.perf_counter()
    fitted = fit(backend, state, callbacks, validate)
    seconds = time.perf_counter() - started
    reason = fitted.stop_reason
    if reason == StopReason.non_finite_loss:  # the last good checkpoint stays the latest
        return Outcome.stopped(reason, fitted.stop_detail or "non-finite loss")
    checkpointer.save(state)  # the final state, whatever stopped us (cancel, timeout, done)
    requeued = (StopReason.shutdown, StopReason.preempted)
    if reason in requeued and state.epoch >= state.epochs:
        reason = None  # every epoch was done already: finish the job here
    if reason in (*requeued, StopReason.cancelled, StopReason.timeout):
        if store is not None and reason in requeued:  # the next attempt resumes from it
            store.drain(store.stop_wait_seconds)
        detail = f"stopped after epoch {state.epoch} of {state.epochs}"
        errors = dict.fromkeys(requeued, detail) | {StopReason.timeout: f"{detail} (timeout)"}
        return Outcome.stopped(reason, errors.get(reason))  # a clean cancel is no error
    try:
        logs = fitted.logs
        noted = input_watch.warnings
        result = finish(
            spec, backend, splits, state, logs, seconds, workdir, timings, job_id, noted
        )
    except ExportError as exc:  # the job fails loudly rather than ship a model that differs
        return Outcome.failure(ErrorCode.internal_error, str(exc))
    if store is not None and backend.is_main:
        with phase(timings, "store_wait_s"):
            failed = publish_model(store, spec, files)
        if failed is not None:  # never succeeded without its model where the API reads it
            return Outcome.failure(ErrorCode.infrastructure, failed)
    timings |= {"fit_s": seconds, "checkpoint_s": checkpointer.seconds}
    if store is not None and backend.is_main:  # beside the fit, not part of it
        timings["checkpoint_upload_s"] = store.upload_seconds
    result["timings"] = {k: round(v, 4) for k, v in timings.items()}
    return Outcome(JobStatus.succeeded, reason or StopReason.completed, result=result)
