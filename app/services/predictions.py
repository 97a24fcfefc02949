"""Predictions from a succeeded job's `model.onnx`: a bounded, thread-safe LRU of ONNX Runtime
sessions per API process, and the answer (class, probabilities, or values) for a batch.

The model takes raw inputs (the job's normalization is its first node, see model-card.json), so
nothing here knows how the job was trained; onnxruntime is the only inference code the API loads.
With a store other than the artifacts directory, the two files are fetched from it into this
API machine's artifacts directory on first use (`fetch_model_files`), and loaded from there.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.core.config import get_settings
from app.domain.job_files import CARD_FILE, ONNX_FILE, JobFiles, job_key
from app.domain.redact import without_server_paths
from app.storage import ObjectNotFound, get_store
from app.storage.registry import is_artifacts_dir


class NoModel(LookupError):
    """The job has no (readable) exported model: answered 409."""


@dataclass(frozen=True)
class LoadedModel:
    """One job's inference session and what its model card says about inputs and outputs."""

    session: Any  # onnxruntime.InferenceSession
    input_name: str
    output_name: str
    row_shape: tuple[int, ...]
    task: str
    classes: list[Any] | None
    vocab: int | None = None  # token models: each input is a token id below it

    def predict(self, batch: np.ndarray) -> dict[str, Any]:
        """The answer for a float32 batch already checked against `row_shape`."""
        (out,) = self.session.run([self.output_name], {self.input_name: batch})
        out = np.asarray(out, dtype=np.float64)
        if self.task != "classification":
            values = out[:, 0] if out.ndim == 2 and out.shape[1] == 1 else out
            return {"predictions": _finite_or_none(values)}
        shifted = np.exp(out - out.max(axis=1, keepdims=True))  # softmax, stable for any logit
        probabilities = shifted / shifted.sum(axis=1, keepdims=True)
        indices = out.argmax(axis=1).tolist()
        classes = self.classes
        labels = (
            [classes[i] for i in indices] if classes and len(classes) > max(indices) else indices
        )
        return {"predictions": labels, "probabilities": _finite_or_none(probabilities)}


def _finite_or_none(values: np.ndarray) -> list[Any]:
    """As JSON allows: a value that is not finite (an overflowing regression output) is null."""
    finite = np.isfinite(values)
    if finite.all():
        return values.tolist()
    cells = values.astype(object)
    cells[~finite] = None
    return cells.tolist()


def _clean(exc: BaseException) -> str:
    """A library's message for the client: ONNX Runtime's and OSError's name the full path."""
    return without_server_paths(str(exc))


def model_files(job_dir: Path) -> tuple[Path, Path]:
    """A job's model.onnx and model-card.json; NoModel if either is missing or lies outside."""
    root = job_dir.resolve()
    files, paths = JobFiles(root), []
    for wanted in (files.onnx, files.model_card):
        path = wanted.resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise NoModel(f"the job has no {wanted.name}")
        paths.append(path)
    return paths[0], paths[1]


def fetch_model_files(job_id: str, job_dir: Path) -> None:
    """Copy the job's model-card.json and model.onnx from the store into `job_dir` when it lacks
    them and the store is elsewhere (NoModel if the store has none; StoreUnavailable, a 503,
    while it is down). Each lands whole (written aside, then renamed); the card first, as a
    cached session is keyed by model.onnx."""
    files = JobFiles(job_dir)
    if is_artifacts_dir(get_settings()) or (files.onnx.is_file() and files.model_card.is_file()):
        return
    store = get_store()
    for path in (files.model_card, files.onnx):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as out:
                for chunk in store.iter_bytes(job_key(job_id, "model", path.name)):
                    out.write(chunk)
            os.replace(tmp, path)
        except ObjectNotFound:
            raise NoModel(f"the job has no {path.name}") from None
        finally:
            tmp.unlink(missing_ok=True)


def _read_card(card_path: Path) -> tuple[tuple[int, ...], str, list[Any] | None, int | None]:
    """Row shape, task, classes and (token models) the vocabulary from the model card."""
    try:
        card = json.loads(card_path.read_text())
        row_shape = tuple(int(d) for d in card["input"]["shape"][1:])
        task, classes = str(card["task"]), card.get("classes")
        vocab = card["input"].get("vocab")
        vocab = None if vocab is None else int(vocab)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NoModel(f"the job's {CARD_FILE} is unreadable: {_clean(exc)}") from exc
    return row_shape, task, classes if isinstance(classes, list) else None, vocab


def open_model(onnx_path: Path, card_path: Path, threads: int) -> LoadedModel:
    """An inference session for one exported model, on the CPU with `threads` intra-op threads."""
    import onnxruntime as ort  # imported on first use: the API starts without paying for it

    row_shape, task, classes, vocab = _read_card(card_path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # No arena: a request's buffers go back when it ends, instead of the process keeping its
    # largest request's peak for good (EPOCHAL_MAX_PREDICT_BYTES bounds that peak).
    options.enable_cpu_mem_arena = False
    try:
        session = ort.InferenceSession(
            str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own types for a bad file
        raise NoModel(f"the job's {ONNX_FILE} cannot be loaded: {_clean(exc)}") from exc
    graph_rows = session.get_inputs()[0].shape[1:]  # ints where fixed, names where not
    if len(graph_rows) != len(row_shape) or any(
        isinstance(d, int) and d != r for d, r in zip(graph_rows, row_shape, strict=False)
    ):
        raise NoModel(f"{CARD_FILE} says rows of {list(row_shape)}, model.onnx {graph_rows}")
    return LoadedModel(
        session=session,
        input_name=session.get_inputs()[0].name,
        output_name=session.get_outputs()[0].name,
        row_shape=row_shape,
        task=task,
        classes=classes,
        vocab=vocab,
    )


class SessionCache:
    """At most `capacity` loaded models, least recently used out first; safe across threads.

    An entry is keyed by the job and its file's inode, mtime and size, so a re-exported model
    is loaded afresh. Two threads missing the same job at once may both load it; one is kept.
    """

    def __init__(self, capacity: int, threads: int = 1) -> None:
        self.capacity, self.threads = capacity, threads
        self._entries: OrderedDict[str, tuple[tuple[int, int, int], LoadedModel]] = OrderedDict()
        self._lock = threading.Lock()
        self.loads = 0  # how many sessions this cache has built (tests, metrics)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, job_id: str, job_dir: Path) -> LoadedModel:
        """The job's model, loaded on a miss; NoModel when it has none."""
        version = _version(job_dir)
        with self._lock:
            entry = self._entries.get(job_id)
            if entry is not None and entry[0] == version:
                self._entries.move_to_end(job_id)
                return entry[1]
        onnx_path, card_path = model_files(job_dir)  # a miss checks where the files really are
        model = open_model(onnx_path, card_path, self.threads)  # outside the lock: can be slow
        with self._lock:
            self.loads += 1
            self._entries[job_id] = (version, model)
            self._entries.move_to_end(job_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return model

    def cached(self, job_id: str, job_dir: Path) -> LoadedModel | None:
        """The job's model if it is loaded and its file unchanged (no loading: cheap)."""
        try:
            version = _version(job_dir)
        except NoModel:
            return None
        with self._lock:
            entry = self._entries.get(job_id)
            if entry is None or entry[0] != version:
                return None
            self._entries.move_to_end(job_id)
            return entry[1]


def _version(job_dir: Path) -> tuple[int, int, int]:
    """Which model.onnx is there now: one stat per request (a new export or a swapped-in link
    changes it, and the miss that follows resolves the path again)."""
    try:
        stat = os.stat(JobFiles(job_dir).onnx)
    except OSError:
        raise NoModel(f"the job has no {ONNX_FILE}") from None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size
