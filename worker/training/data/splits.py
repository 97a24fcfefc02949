"""Splitting and normalizing by spec, and each epoch's sample order.

The validation split is drawn with the job's seed before any shuffling, normalization
statistics come from the training split only, and the official test split (when the data set
has one) is kept apart for the final result.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from app.schemas.dataset_spec import input_shape_and_classes
from app.schemas.job_spec import JobSpec
from worker.training.data.types import DataError, RawData, Splits


def split_and_normalize(raw: RawData, spec: JobSpec) -> Splits:
    ds, seed = spec.dataset, spec.training.seed
    x, y, xt, yt = raw.x, raw.y, raw.x_test, raw.y_test
    if ds.limit:
        x, y = x[: ds.limit], y[: ds.limit]
        if xt is not None and yt is not None:
            xt, yt = xt[: ds.limit], yt[: ds.limit]
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = int(round(len(x) * ds.validation_split))
    if n_val == 0 and ds.validation_split > 0:
        n_val = 1
    val_idx, train_idx = np.sort(order[:n_val]), np.sort(order[n_val:])
    if len(train_idx) == 0:
        raise DataError("no training samples left after the validation split")
    x_train, prepare, (scale, shift) = _preparation(x[train_idx], raw, ds.normalize)
    return Splits(
        x_train=x_train,
        y_train=y[train_idx],
        x_val=prepare(x[val_idx]) if n_val else None,
        y_val=y[val_idx] if n_val else None,
        x_test=None if xt is None else prepare(xt),
        y_test=yt,
        outputs=raw.classes or _outputs(spec, y, yt),
        scale=scale,
        shift=shift,
        fingerprint=data_fingerprint(x, y, xt, yt),
        vocab=raw.vocab,
    )


def _preparation(
    x_train: np.ndarray, raw: RawData, how: str
) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The training split as the back-end takes it, how to prepare the others, (scale, shift).

    Values are indexed in the stored dtype (uint8 images: a quarter of the bytes), converted
    once, then normalized in place: one float32 copy per split instead of four. Token ids
    stay int32 and are never scaled ("unit", the default, leaves them as they are).
    """
    if raw.vocab is not None:
        if how == "standard":
            raise DataError("dataset.normalize standard does not apply to token ids; use none")
        return x_train, lambda a: a, normalizer(x_train, None, "none")
    x_train = x_train.astype(np.float32)
    scale, shift = normalizer(x_train, raw.unit_scale, how)

    def prepare(a: np.ndarray) -> np.ndarray:
        return _normalize(a.astype(np.float32), scale, shift)

    return _normalize(x_train, scale, shift), prepare, (scale, shift)


def data_fingerprint(*arrays: np.ndarray | None) -> str:
    """sha256 over each array's dtype, shape and bytes (x, y, x_test, y_test after limit)."""
    digest = hashlib.sha256()
    for array in arrays:
        if array is None:
            digest.update(b"none;")
            continue
        digest.update(f"{array.dtype.str}{array.shape};".encode())
        digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def _normalize(x: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """(x - shift) / scale, in place on a float32 array of our own."""
    x -= shift
    x /= scale
    return x


def _outputs(spec: JobSpec, y: np.ndarray, y_test: np.ndarray | None) -> int:
    if spec.task == "regression":
        return 1
    known = input_shape_and_classes(spec)
    if known is not None:
        return known[1]
    return int(max(y.max(), y_test.max() if y_test is not None else 0)) + 1


def normalizer(
    x_train: np.ndarray, unit_scale: float | None, how: str
) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift) such that (x - shift) / scale is the normalized input."""
    one, zero = np.float32(1.0), np.float32(0.0)
    if how == "none":
        return np.asarray(one), np.asarray(zero)
    if how == "unit":
        top = unit_scale or float(np.abs(x_train).max()) or 1.0
        return np.asarray(np.float32(top)), np.asarray(zero)
    if x_train.ndim > 2:  # images: one mean and std over all pixels, as the seed's Normalize
        mean, std = x_train.mean(), x_train.std()
        return np.asarray(np.float32(std or 1.0)), np.asarray(np.float32(mean))
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    return np.where(std > 0, std, 1.0).astype(np.float32), mean.astype(np.float32)


def epoch_order(samples: int, seed: int, epoch_index: int, shuffle: bool) -> np.ndarray:
    """The sample order of one epoch: a fresh permutation of samples (not of batches).

    Derived from (seed, epoch) alone, so both back-ends see the same order and a resumed
    attempt replays the epoch it lost exactly.
    """
    if not shuffle:
        return np.arange(samples)
    return np.random.default_rng([seed, epoch_index, 1]).permutation(samples)


def epoch_seed(seed: int, epoch_index: int, rank: int = 0) -> int:
    """A seed for one epoch's random draws (dropout) on one rank, from the job's seed."""
    state = np.random.SeedSequence([seed, epoch_index, rank, 2]).generate_state(1, np.uint64)
    return int(state[0] % 2**63)


def global_steps(samples: int, global_batch: int, replicas: int) -> int:
    """Steps per epoch; with several replicas the partial last batch is dropped (P21)."""
    if replicas > 1:
        return samples // global_batch
    return -(-samples // global_batch)
