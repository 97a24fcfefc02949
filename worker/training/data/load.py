"""A job's data: the raw arrays its spec names, split and normalized for a back-end."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.schemas.job_spec import JobSpec
from worker.training.data.builtin import load_digits, load_idx_dataset, make_synthetic
from worker.training.data.splits import split_and_normalize
from worker.training.data.types import RawData, Splits
from worker.training.data.uploads import load_upload


def load_raw(spec: JobSpec, data_dir: Path) -> RawData:
    """The arrays of the data set the spec names, as stored."""
    ds = spec.dataset
    if ds.name in ("fashion_mnist", "mnist"):
        return load_idx_dataset(ds.name, data_dir)
    if ds.name == "digits":
        return load_digits()
    if ds.name == "synthetic":
        return make_synthetic(ds, spec.task, spec.training.seed)
    return load_upload(ds.id or "", data_dir)


def load_splits(spec: JobSpec, data_dir: Path) -> Splits:
    """Everything a back-end needs, as numpy."""
    splits = split_and_normalize(load_raw(spec, data_dir), spec)
    if spec.task == "classification":
        splits.y_train = splits.y_train.astype(np.int64)
    return splits
