"""The ingest: a data set's source (an uploaded object, a prefix in the store, or a path under
an allowed root) read once, every record checked, written as shards with an index; then the
row is ready with its rows, bytes, classes and version, or failed with the file and the record.

Runs in a worker's Celery task (worker.tasks), never on the API's event loop; it needs no GPU
and no framework. A failed ingest deletes whatever it wrote under the data set's prefixes, so
no index of it remains.
"""

from __future__ import annotations

import logging
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import datasets
from app.domain.data_roots import SOURCE_PATH, check_path
from app.domain.dataset_uploads import AUTO_FORMAT, SOURCE_STORE, UPLOADS_PREFIX
from app.domain.redact import without_server_paths
from app.domain.tables import Dataset, utcnow
from app.domain.upload_rules import UploadError
from app.services import ingest_lease
from app.services.queue import publish_ingest
from app.shards import ShardError, ShardIndex, dataset_prefix
from app.shards.ingest import Task, ingest_file
from app.storage import get_store
from app.storage.base import ObjectNotFound, Store, StoreError

log = logging.getLogger(__name__)
TEST_ARRAYS = ("x_test", "y_test")
SUFFIX_FORMATS = ("npz", "csv", "npy", AUTO_FORMAT)  # what ingest_file tells by the suffix


@dataclass(frozen=True)
class Source:
    """What one ingest reads, and how (copied from the row, so no session stays open)."""

    dataset_id: str
    source: str
    task: Task
    label_column: str | None
    format: str | None


def _source(dataset_id: str) -> Source | None:
    """The data set's source, while it is ingesting; None if it is gone or done already."""
    with session_scope() as session:
        row = session.get(Dataset, dataset_id)
        if row is None or row.status != "ingesting" or row.source is None:
            return None
        task: Task = "regression" if row.task == "regression" else "classification"
        fmt = row.format if row.format not in SUFFIX_FORMATS else None
        return Source(row.id, row.source, task, row.label_column, fmt)


def _download(store: Store, key: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        for chunk in store.iter_bytes(key):
            out.write(chunk)


def fetch(store: Store, source: str, folder: Path) -> Path:
    """The source as a local path: a path under a root as it is (checked again), an object
    of the store downloaded once, or every object under a store prefix, their folders kept."""
    if source.startswith(SOURCE_PATH):
        return check_path(source.removeprefix(SOURCE_PATH), get_settings().data_roots)
    key = source.removeprefix(SOURCE_STORE)
    name = key.rstrip("/").rsplit("/", 1)[-1]
    if not key.endswith("/"):
        try:
            store.head(key)
        except ObjectNotFound:
            key += "/"  # a prefix named without its slash
        else:
            _download(store, key, folder / name)
            return folder / name
    found = False
    for info in store.list_objects(key):
        _download(store, info.key, folder / name / info.key.removeprefix(key))
        found = True
    if not found:
        raise UploadError(422, f"nothing in the store under {key}")
    return folder / name


def _has_test_part(path: Path) -> bool:
    if path.suffix.lower() != ".npz":
        return False
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    return {f"{a}.npy" for a in TEST_ARRAYS} <= names


def _ingest(store: Store, src: Source, path: Path) -> tuple[ShardIndex, ShardIndex | None]:
    """Train (and, from an .npz with x_test and y_test, test) written; their indexes."""
    shard_bytes = get_settings().ingest_shard_bytes
    extra: dict[str, Any] = {"format": src.format} if src.format else {}
    train = ingest_file(
        store,
        dataset_prefix(src.dataset_id, "train"),
        path,
        src.task,
        label_column=src.label_column,
        shard_bytes=shard_bytes,
        **extra,
    )
    if not _has_test_part(path):
        return train, None
    _progress(src.dataset_id, 0.5)
    test = ingest_file(
        store,
        dataset_prefix(src.dataset_id, "test"),
        path,
        src.task,
        arrays=TEST_ARRAYS,
        shard_bytes=shard_bytes,
    )
    if test.schema.x_shape != train.schema.x_shape or test.schema.x_dtype != train.schema.x_dtype:
        raise ShardError(
            f"{path.name}: x_test samples are {test.schema.x_dtype} {test.schema.x_shape}, "
            f"x samples {train.schema.x_dtype} {train.schema.x_shape}"
        )
    return train, test


def _progress(dataset_id: str, fraction: float) -> None:
    with session_scope() as session:
        row = session.get(Dataset, dataset_id)
        if row is not None and row.status == "ingesting":
            row.progress = fraction


def _ready(dataset_id: str, train: ShardIndex, test: ShardIndex | None) -> bool:
    """The row ready, from the indexes; False if it was deleted meanwhile."""
    with session_scope() as session:
        row = session.get(Dataset, dataset_id)
        if row is None:
            return False
        row.status, row.error, row.progress = "ready", None, 1.0
        row.shape = list(train.schema.x_shape)
        row.dtype = np.dtype(train.schema.x_dtype).name
        row.samples = train.rows
        row.test_samples = None if test is None else test.rows
        row.classes = train.classes
        row.size_bytes = train.size + (0 if test is None else test.size)
        row.version = train.version
        return True


def _over_quota(dataset_id: str, size: int) -> str | None:
    """Why shards of `size` bytes break the owner's quota (beyond what the data set holds
    already: its upload's reserved size); None when they fit."""
    with session_scope() as session:
        row = session.get(Dataset, dataset_id)
        if row is None or row.owner_id is None or size <= row.size_bytes:
            return None
        return datasets.over_quota(
            session, row.owner_id, size - row.size_bytes, "its shards would add"
        )


def _fail(store: Store, dataset_id: str, why: str) -> None:
    store.delete_prefix(f"datasets/{dataset_id}/")  # no index, no shard of it stays
    with session_scope() as session:
        row = session.get(Dataset, dataset_id)
        if row is None:
            return
        row.status, row.progress, row.size_bytes = "failed", None, 0
        row.error = without_server_paths(why)[:4000]


def queue_ingest(session: Session, dataset: Dataset) -> Dataset:
    """Send the committed data set to the ingest task; if the broker cannot take it, the data
    set fails at once, saying so, rather than waiting for nothing."""
    dataset.ingest_sent_at = utcnow()
    session.commit()
    try:
        publish_ingest(dataset.id)
    except Exception as exc:  # any broker error: the row must not stay ingesting
        dataset.status, dataset.progress = "failed", None
        dataset.error = f"the ingest could not be queued ({type(exc).__name__}); register again"
        session.commit()
    return dataset


def run_ingest(dataset_id: str) -> str:
    """Ingest the data set if it is waiting for it and no live ingest holds it; its status
    afterwards ("skipped": gone, done, or another ingest at work on it)."""
    if not ingest_lease.claim(dataset_id):
        return "skipped"
    src = _source(dataset_id)
    if src is None:
        return "skipped"
    with ingest_lease.held(dataset_id):
        return _run(get_store(), src)


def _run(store: Store, src: Source) -> str:
    dataset_id = src.dataset_id
    try:
        with tempfile.TemporaryDirectory(prefix="epochal-ingest-") as folder:
            train, test = _ingest(store, src, fetch(store, src.source, Path(folder)))
    except UploadError as exc:
        _fail(store, dataset_id, exc.detail)
        return "failed"
    except (ShardError, StoreError, OSError, ValueError, zipfile.BadZipFile) as exc:
        _fail(store, dataset_id, str(exc) or type(exc).__name__)
        return "failed"
    except Exception as exc:  # anything else: the data set must not stay ingesting
        log.exception("the ingest of data set %s failed", dataset_id)
        _fail(store, dataset_id, f"the ingest failed unexpectedly ({type(exc).__name__})")
        return "failed"
    finally:
        if src.source.startswith(SOURCE_STORE + UPLOADS_PREFIX):
            store.delete(src.source.removeprefix(SOURCE_STORE))  # the shards hold it now
    if (why := _over_quota(dataset_id, train.size + (test.size if test else 0))) is not None:
        _fail(store, dataset_id, why)
        return "failed"
    if not _ready(dataset_id, train, test):
        store.delete_prefix(f"datasets/{dataset_id}/")  # deleted while it was ingested
        return "deleted"
    log.info("data set %s ingested: %d rows, version %s", dataset_id, train.rows, train.version)
    return "ready"
