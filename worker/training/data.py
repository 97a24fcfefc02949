"""Data sets as numpy arrays: built-ins, synthetic and uploads; split and normalized by spec.

The validation split is drawn with the job's seed before any shuffling, normalization
statistics come from the training split only, and the official test split (when the data set
has one) is kept apart for the final result.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.schemas.job_spec import DatasetSpec, JobSpec, input_shape_and_classes

IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
SYSTEM_DIRS = {"fashion_mnist": "fashion-mnist", "mnist": "mnist"}


class DataError(Exception):
    """The data set cannot be used; the message says why and what to do."""


@dataclass
class Splits:
    """Arrays ready for a back-end: x float32; y int64 classes or float32 targets."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray | None
    y_val: np.ndarray | None
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    outputs: int  # classes, or 1 for regression
    # The normalization applied: normalized = (raw - shift) / scale, float32 (model.onnx redoes it)
    scale: np.ndarray = field(default_factory=lambda: np.asarray(np.float32(1.0)))
    shift: np.ndarray = field(default_factory=lambda: np.asarray(np.float32(0.0)))
    fingerprint: str = ""  # sha256 of the raw arrays used (see data_fingerprint)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


@dataclass
class RawData:
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    unit_scale: float | None  # what "unit" divides by (255 for 8-bit images, 16 for digits)
    classes: int | None = None  # known from the data set (uploads); else from the labels


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (gzipped or not) into an array."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        zero, dtype_code, ndim = struct.unpack(">HBB", f.read(4))
        if zero != 0 or dtype_code != 0x08:
            raise DataError(f"{path} is not an unsigned-byte IDX file")
        shape = struct.unpack(f">{ndim}I", f.read(4 * ndim))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(shape)


def find_idx(name: str, data_dir: Path) -> dict[str, Path]:
    """Locate the four IDX files in EPOCHAL_DATA_DIR/<name> or /usr/share/datasets/<name>."""
    places = [data_dir / name, Path("/usr/share/datasets") / SYSTEM_DIRS[name]]
    for place in places:
        found = {}
        for split, (images, labels) in IDX_FILES.items():
            for base in (images, labels):
                hits = [
                    place / f"{base}{ext}"
                    for ext in (".gz", "")
                    if (place / f"{base}{ext}").exists()
                ]
                if hits:
                    found[f"{split}/{base}"] = hits[0]
        if len(found) == 4:
            return found
    where = " or ".join(str(p) for p in places)
    raise DataError(
        f"the {name} IDX files (train-images-idx3-ubyte[.gz] and the other three) are not in "
        f"{where}; install Debian's dataset-{SYSTEM_DIRS[name]} or copy them there"
    )


def load_idx_dataset(name: str, data_dir: Path) -> RawData:
    try:
        files = find_idx(name, data_dir)
    except DataError as missing:
        from worker.training.download import download_if_allowed  # rarely needed

        download_if_allowed(name, data_dir, missing)
        files = find_idx(name, data_dir)
    arrays = _cached_idx(name, files, data_dir / "cache")
    x, y = arrays["train/train-images-idx3-ubyte"], arrays["train/train-labels-idx1-ubyte"]
    xt, yt = arrays["test/t10k-images-idx3-ubyte"], arrays["test/t10k-labels-idx1-ubyte"]
    return RawData(x, y.astype(np.int64), xt, yt.astype(np.int64), unit_scale=255.0)


def _cached_idx(name: str, files: dict[str, Path], cache_dir: Path) -> dict[str, np.ndarray]:
    """The decoded IDX arrays, kept as an uncompressed .npz beside the data: gunzipping
    Fashion-MNIST costs ~0.5 s per job, reading the cache ~0.05 s. The cache is keyed by the
    source files' paths, sizes and mtimes, so a replaced file is decoded again."""
    stamp = json.dumps(
        {k: [str(p), p.stat().st_size, p.stat().st_mtime_ns] for k, p in sorted(files.items())}
    )
    key = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    path = cache_dir / f"{name}-{key}.npz"
    if path.exists():
        with np.load(path, allow_pickle=False) as cached:
            return {k: cached[k.replace("/", "__")] for k in files}
    arrays = {key_: read_idx(source) for key_, source in files.items()}
    try:  # best effort: a read-only data dir just means no cache
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache_dir / f".{path.name}.{os.getpid()}.npz"
        np.savez(tmp, **{k.replace("/", "__"): v for k, v in arrays.items()})  # type: ignore[arg-type]
        os.replace(tmp, path)
    except OSError:
        pass
    return arrays


def load_digits() -> RawData:
    from sklearn.datasets import load_digits as sklearn_digits  # bundled with scikit-learn

    bunch = sklearn_digits()
    return RawData(bunch.images, bunch.target.astype(np.int64), None, None, unit_scale=16.0)


def make_synthetic(ds: DatasetSpec, task: str, seed: int) -> RawData:
    """A learnable problem from the job's seed: a random two-layer teacher, plus noise."""
    rng = np.random.default_rng([seed, 7919])
    samples, features = ds.samples or 10_000, ds.features or 32
    total = samples + samples // 5  # the extra fifth is the test split
    x = rng.standard_normal((total, features)).astype(np.float32)
    w1 = rng.standard_normal((features, 64)) / np.sqrt(features)
    hidden = np.tanh(x @ w1)
    if task == "regression":
        w2 = rng.standard_normal((64, 1)) / 8.0
        y = (hidden @ w2)[:, 0] + 0.05 * rng.standard_normal(total)
        y = y.astype(np.float32)
    else:
        w2 = rng.standard_normal((64, ds.classes or 10))
        y = np.argmax(hidden @ w2 + 0.1 * rng.standard_normal((total, ds.classes or 10)), axis=1)
    return RawData(x[:samples], y[:samples], x[samples:], y[samples:], unit_scale=None)


def load_raw(spec: JobSpec, data_dir: Path) -> RawData:
    ds = spec.dataset
    if ds.name in ("fashion_mnist", "mnist"):
        return load_idx_dataset(ds.name, data_dir)
    if ds.name == "digits":
        return load_digits()
    if ds.name == "synthetic":
        return make_synthetic(ds, spec.task, spec.training.seed)
    from worker.training.uploads import load_upload

    return load_upload(ds.id or "", data_dir)


def split_and_normalize(raw: RawData, spec: JobSpec) -> Splits:
    ds, seed = spec.dataset, spec.training.seed
    x, y, xt, yt = raw.x, raw.y, raw.x_test, raw.y_test
    if ds.limit:
        x, y = x[: ds.limit], y[: ds.limit]
        xt, yt = (xt[: ds.limit], yt[: ds.limit]) if xt is not None else (None, None)
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = int(round(len(x) * ds.validation_split))
    if n_val == 0 and ds.validation_split > 0:
        n_val = 1
    val_idx, train_idx = np.sort(order[:n_val]), np.sort(order[n_val:])
    if len(train_idx) == 0:
        raise DataError("no training samples left after the validation split")
    # Index in the stored dtype (uint8 images: a quarter of the bytes), convert once, then
    # normalize in place: one float32 copy per split instead of four.
    x_train = x[train_idx].astype(np.float32)
    scale, shift = _normalizer(x_train, raw.unit_scale, ds.normalize)
    return Splits(
        x_train=_normalize(x_train, scale, shift),
        y_train=y[train_idx],
        x_val=_normalize(x[val_idx].astype(np.float32), scale, shift) if n_val else None,
        y_val=y[val_idx] if n_val else None,
        x_test=None if xt is None else _normalize(xt.astype(np.float32), scale, shift),
        y_test=yt,
        outputs=raw.classes or _outputs(spec, y, yt),
        scale=scale,
        shift=shift,
        fingerprint=data_fingerprint(x, y, xt, yt),
    )


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


def _normalizer(
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


def load_splits(spec: JobSpec, data_dir: Path) -> Splits:
    """Everything a back-end needs, as numpy."""
    splits = split_and_normalize(load_raw(spec, data_dir), spec)
    if spec.task == "classification":
        splits.y_train = splits.y_train.astype(np.int64)
    return splits


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
