"""Reading an uploaded data set in the training process (the API validated and stored it).

The file is the normalized .npz app.domain.uploads wrote: `x`, `y`, optionally `x_test`, `y_test`;
an x of its TOKEN_DTYPE holds token ids. It is read with allow_pickle=False all the same: a file
on disk is not trusted code.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from app.domain.job_files import upload_path
from app.domain.uploads import TOKEN_DTYPE, vocab_of
from app.schemas.ids import is_id
from app.shards.index import upload_key
from app.storage.base import ObjectNotFound, Store
from worker.training.data.types import DataError, RawData


def load_upload(dataset_id: str, data_dir: Path, store: Store | None = None) -> RawData:
    """The arrays of upload `dataset_id`, fetched from `store` into the data directory when
    this machine does not hold them; DataError when it is gone or unreadable."""
    if not is_id(dataset_id):  # the spec allows only these; never build a path else
        raise DataError(f"{dataset_id!r} is not a data set id")
    path = upload_path(data_dir, dataset_id)
    if not path.is_file() and store is not None:
        _fetch(store, dataset_id, path)
    if not path.is_file():
        raise DataError(
            f"uploaded data set {dataset_id} is not in this worker's data directory: it was "
            "deleted, or this worker does not share the API's (EPOCHAL_DATA_DIR)"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"uploaded data set {dataset_id} cannot be read: {exc}") from exc
    x, y = arrays["x"], arrays["y"]
    x_test, y_test = arrays.get("x_test"), arrays.get("y_test")
    classes = None
    if y.dtype.kind in "iu":  # classification: fixed by the whole upload, not by dataset.limit
        classes = int(y.max()) + 1
    # Like classes, fixed by the whole upload; an x of TOKEN_DTYPE holds token ids.
    vocab = vocab_of(x, x_test) if x.dtype == TOKEN_DTYPE else None
    return RawData(x, y, x_test, y_test, unit_scale=None, classes=classes, vocab=vocab)


def _fetch(store: Store, dataset_id: str, path: Path) -> None:
    """The store's copy of the upload, written aside and renamed (a killed fetch leaves no
    partial file under the real name); nothing when the store has none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with aside.open("wb") as f:
            for chunk in store.iter_bytes(upload_key(dataset_id)):
                f.write(chunk)
        os.replace(aside, path)
    except ObjectNotFound:
        pass
    finally:
        aside.unlink(missing_ok=True)
