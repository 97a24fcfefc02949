"""A job's data: the raw arrays its spec names, split and normalized for a back-end."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.schemas.job_spec import JobSpec
from app.storage.base import Store
from app.storage.registry import get_store
from worker.training.data.builtin import load_digits, load_idx_dataset, make_synthetic
from worker.training.data.splits import split_and_normalize
from worker.training.data.streamed import open_streamed, streamed_splits
from worker.training.data.types import RawData, Splits
from worker.training.data.uploads import load_upload


def load_raw(spec: JobSpec, data_dir: Path, store: Store | None = None) -> RawData:
    """The arrays of the data set the spec names, as stored (an upload this machine does not hold
    comes from `store`)."""
    ds = spec.dataset
    if ds.name in ("fashion_mnist", "mnist"):
        return load_idx_dataset(ds.name, data_dir)
    if ds.name == "digits":
        return load_digits()
    if ds.name == "synthetic":
        return make_synthetic(ds, spec.task, spec.training.seed)
    return load_upload(ds.id or "", data_dir, store)


def load_splits(spec: JobSpec, data_dir: Path, store: Store | None = None) -> Splits:
    """Everything a back-end needs, as numpy; a sharded data set (an index in the store,
    default the service's) is streamed instead of loaded."""
    if spec.dataset.id is not None:
        store = store if store is not None else get_store()
        streamed = open_streamed(spec, store)
        if streamed is not None:
            splits = streamed_splits(streamed)
            splits.y_train = splits.y_train.astype(
                np.int64 if spec.task == "classification" else np.float32
            )
            return splits
    splits = split_and_normalize(load_raw(spec, data_dir, store), spec)
    if spec.task == "classification":
        splits.y_train = splits.y_train.astype(np.int64)
    return splits
