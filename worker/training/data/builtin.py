"""The built-in data sets: mnist and fashion_mnist (IDX files), digits, synthetic."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from app.schemas.dataset_spec import DatasetSpec
from worker.training.data.idx import cached_idx, find_idx
from worker.training.data.types import DataError, RawData


def load_idx_dataset(name: str, data_dir: Path) -> RawData:
    """mnist or fashion_mnist from its IDX files (downloaded first, when allowed)."""
    try:
        files = find_idx(name, data_dir)
    except DataError as missing:
        from worker.training.data.download import download_if_allowed  # rarely needed

        download_if_allowed(name, data_dir, missing)
        files = find_idx(name, data_dir)
    arrays = cached_idx(name, files, data_dir / "cache")
    x, y = arrays["train/train-images-idx3-ubyte"], arrays["train/train-labels-idx1-ubyte"]
    xt, yt = arrays["test/t10k-images-idx3-ubyte"], arrays["test/t10k-labels-idx1-ubyte"]
    return RawData(x, y.astype(np.int64), xt, yt.astype(np.int64), unit_scale=255.0)


# scikit-learn ships digits as one CSV (64 pixels, then the label, per row). Reading the file
# is what sklearn.datasets.load_digits does; importing scikit-learn to do it imports SciPy with it,
# in every training process that trains on digits, and in every warm one.
DIGITS_CSV = ("datasets", "data", "digits.csv.gz")


def load_digits() -> RawData:
    """scikit-learn's 1,797 8x8 digits, read from its bundled file without importing it."""
    spec = importlib.util.find_spec("sklearn")  # finds the package; runs none of its code
    roots = spec.submodule_search_locations if spec is not None else None
    if not roots:
        raise DataError("the digits data set comes with scikit-learn: pip install scikit-learn")
    table = np.loadtxt(Path(roots[0]).joinpath(*DIGITS_CSV), delimiter=",", dtype=np.float64)
    images, labels = table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    return RawData(images, labels, None, None, unit_scale=16.0)


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
