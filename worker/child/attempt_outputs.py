"""What a finished attempt leaves, in the training process: the framework's model file,
model.onnx and model-card.json (the main rank alone writes them), the final result with its
evaluation report, and the model put in the store; and `phase`, the attempt's timings."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from app.domain.job_files import CARD_FILE, MODEL_FILES, ONNX_FILE, JobFiles
from app.schemas.job_spec import JobSpec
from app.schemas.metric_row import SCORES, score_field
from worker.training.backend import Backend
from worker.training.callbacks import Logs, TrainState
from worker.training.checkpoint_upload import StoreCheckpoints
from worker.training.data import Splits
from worker.training.disk import undone_if_full
from worker.training.evaluation import accuracy_gap_warnings
from worker.training.model_card import evaluate, export_onnx, model_card, write_card
from worker.training.warm_start import graph_for, lineage, save_weights

log = logging.getLogger("epochal.child")
TRAIN_FIELDS = tuple(score_field("train", score) for score in SCORES)


@contextmanager
def phase(timings: dict[str, float], name: str) -> Iterator[None]:
    """Add the block's wall time to timings[name] (the job's result reports them)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - started


def final_result(
    backend: Backend, splits: Splits, state: TrainState, logs: Logs, seconds: float
) -> dict[str, Any]:
    """Test metrics when the data set has a test split, else validation (or training) ones."""
    split = "test" if splits.has_test else "val" if splits.has_val else None
    prefix = split or "train"
    if split:
        scores = {score_field(split, k): v for k, v in backend.evaluate(split).items()}
    else:  # the last epoch's training scores, as its metrics row has them
        scores = {name: logs[name] for name in TRAIN_FIELDS if name in logs}
    return {
        **scores,
        "evaluated_on": prefix,
        "best_epoch": state.best_epoch,
        "stopped_epoch": state.epoch,
        "restored_best_weights": state.restored_best_weights,
        "parameters": backend.parameter_count(),
        **backend.topology(),  # replicas and strategy: what really trained, not what was asked
        "training_seconds": round(seconds, 3),
    }


def finish(
    spec: JobSpec,
    backend: Backend,
    splits: Splits,
    state: TrainState,
    logs: Logs,
    seconds: float,
    workdir: Path,
    timings: dict[str, float],
    job_id: str | None,
    noted: Sequence[str] = (),
) -> dict[str, Any]:
    """Export (model file, model.onnx, card) and the final result with its evaluation report
    and warnings (`noted` ones first: the training's own); the main rank alone writes and
    evaluates. Raises ExportError when model.onnx differs."""
    model_dir, onnx = JobFiles(workdir).model_dir, None
    # A full disk leaves no half-written model to be served (the job ends disk_full).
    no_model = partial(shutil.rmtree, model_dir, ignore_errors=True)
    with phase(timings, "export_s"), undone_if_full(workdir, no_model):
        if backend.is_main:
            model_dir.mkdir(parents=True, exist_ok=True)
            backend.export_model(model_dir)
            save_weights(model_dir, graph_for(spec, splits), backend.get_weights())
            onnx = export_onnx(spec, backend, splits, model_dir)
    with phase(timings, "final_eval_s"):
        result = final_result(backend, splits, state, logs, seconds)
        if (parent := lineage(spec)) is not None:
            result["lineage"] = parent
        if onnx is not None:
            result["evaluation"] = evaluate(spec, backend, splits)
            train_accuracy = logs.get(score_field("train", "accuracy"))
            result["warnings"] = accuracy_gap_warnings(result["evaluation"], train_accuracy)
        if noted:
            result["warnings"] = [*noted, *result.get("warnings", [])]
    if onnx is not None:
        card = model_card(spec, splits, job_id or workdir.name, result, onnx)
        with phase(timings, "export_s"), undone_if_full(workdir, no_model):
            result["export"] = {"onnx": onnx}
            write_card(model_dir, card)
    return result


def publish_model(store: StoreCheckpoints, spec: JobSpec, files: JobFiles) -> str | None:
    """Put model.onnx, the card and the model file in the store, then let the last checkpoint
    land, all within EPOCHAL_STORE_WAIT_SECONDS; None when the model is there, else why not."""
    started = time.monotonic()
    names = (ONNX_FILE, CARD_FILE, MODEL_FILES[spec.framework])  # the model file last
    failed = store.publish_model(files.model_dir, names, store.wait_seconds)
    if failed is None and not store.drain(store.wait_seconds - (time.monotonic() - started)):
        log.warning("the last checkpoint is not in the store yet; the model is")
    return failed
