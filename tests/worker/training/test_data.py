"""Data loading: each epoch's sample order, IDX files gzipped or not, and the IDX decode cache."""

from __future__ import annotations

import gzip
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT
from worker.training.data import epoch_order, idx
from worker.training.data.builtin import load_idx_dataset
from worker.training.data.idx import IDX_FILES, read_idx

DEBIAN = Path("/usr/share/datasets/fashion-mnist")
BATCH = 32


def test_each_epoch_is_a_fresh_permutation_of_samples_from_the_seed() -> None:
    first, second = epoch_order(1000, 42, 0, True), epoch_order(1000, 42, 1, True)
    for order in (first, second):
        np.testing.assert_array_equal(np.sort(order), np.arange(1000))  # each sample once
    assert not np.array_equal(first, second)  # reshuffled every epoch
    np.testing.assert_array_equal(first, epoch_order(1000, 42, 0, True))  # same seed, same order
    assert not np.array_equal(first, epoch_order(1000, 43, 0, True))
    np.testing.assert_array_equal(epoch_order(1000, 42, 3, False), np.arange(1000))


def test_samples_are_shuffled_not_whole_batches() -> None:
    """The tutorials' `batch().shuffle()` reorders batches of neighbours; this must not."""
    order = epoch_order(3200, 7, 0, True)
    neighbours = int(np.sum(np.diff(order) == 1))  # i followed by i + 1
    # A batch-level shuffle keeps 31 of every 32 such pairs (3100 here); a permutation of
    # samples has about one in all.
    assert neighbours < 10
    blocks = {tuple(range(b, b + BATCH)) for b in range(0, 3200, BATCH)}
    batches = [tuple(sorted(order[i : i + BATCH].tolist())) for i in range(0, 3200, BATCH)]
    assert not blocks & set(batches)  # no batch is one of the unshuffled batches
    firsts = {int(order[i]) // BATCH for i in range(0, 3200, BATCH)}  # ~63 % of blocks hit
    assert len(firsts) > 40


def write_idx(path: Path, array: np.ndarray) -> None:
    """An unsigned-byte IDX file (gzipped when the name ends in .gz), as read_idx expects."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_dataset(place: Path, ext: str = ".gz") -> None:
    """The four IDX files of a tiny random MNIST-like data set (50 train, 20 test samples)."""
    rng = np.random.default_rng(0)
    place.mkdir(parents=True, exist_ok=True)
    for split, (images, labels) in IDX_FILES.items():
        samples = 50 if split == "train" else 20
        write_idx(place / f"{images}{ext}", rng.integers(0, 256, (samples, 28, 28)))
        write_idx(place / f"{labels}{ext}", rng.integers(0, 10, samples))


def test_uncompressed_idx_files_load_the_same_arrays_as_the_gzipped_ones(tmp_path: Path) -> None:
    if not DEBIAN.exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    plain = tmp_path / "plain"
    (plain / "fashion_mnist").mkdir(parents=True)
    for source in DEBIAN.glob("*.gz"):
        with gzip.open(source) as packed, open(plain / "fashion_mnist" / source.stem, "wb") as out:
            shutil.copyfileobj(packed, out)
    from_plain = load_idx_dataset("fashion_mnist", plain)
    from_gzip = load_idx_dataset("fashion_mnist", tmp_path / "empty")  # the system's .gz files
    assert from_plain.x.shape == (60000, 28, 28) and from_plain.x_test is not None
    for name in ("x", "y", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(from_plain, name), getattr(from_gzip, name))
    assert not list((plain / "fashion_mnist").glob("*.gz"))  # really read the plain files


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The IDX files really decoded (read_idx still runs; the list only records its calls)."""
    calls: list[Path] = []

    def recording(path: Path) -> np.ndarray:
        calls.append(path)
        return read_idx(path)

    monkeypatch.setattr(idx, "read_idx", recording)
    return calls


def test_a_second_load_is_served_from_the_decode_cache(tmp_path: Path, decodes: list[Path]) -> None:
    write_dataset(tmp_path / "mnist")
    first = load_idx_dataset("mnist", tmp_path)
    assert len(decodes) == 4
    cached = list((tmp_path / "cache").glob("mnist-*.npz"))
    assert len(cached) == 1 and not list((tmp_path / "cache").glob(".*"))  # no temporary left
    second = load_idx_dataset("mnist", tmp_path)
    assert len(decodes) == 4  # nothing decoded again
    expected = read_idx(tmp_path / "mnist" / "train-images-idx3-ubyte.gz")
    np.testing.assert_array_equal(first.x, expected)
    for name in ("x", "y", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(second, name), getattr(first, name))


@pytest.mark.parametrize("change", ["size", "mtime"])
def test_a_replaced_source_file_is_decoded_again(
    tmp_path: Path, decodes: list[Path], change: str
) -> None:
    write_dataset(tmp_path / "mnist", ext="")  # uncompressed: the size is the content's
    before = load_idx_dataset("mnist", tmp_path)
    labels = tmp_path / "mnist" / "train-labels-idx1-ubyte"
    stat = labels.stat()
    new_labels = (before.y + 1) % 10  # only this one file changes
    if change == "size":
        new_labels = np.concatenate([new_labels, new_labels[:10]])
    write_idx(labels, new_labels)
    if change == "mtime":  # same size; only the modification time tells it apart
        assert labels.stat().st_size == stat.st_size
        os.utime(labels, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    decodes.clear()
    after = load_idx_dataset("mnist", tmp_path)
    assert decodes  # decoded again, not served from the stale cache entry
    np.testing.assert_array_equal(after.y, new_labels)
    assert len(list((tmp_path / "cache").glob("mnist-*.npz"))) == 2


def test_digits_are_scikit_learns_read_without_importing_it() -> None:
    """The same arrays as sklearn.datasets.load_digits, in a process that never imports
    scikit-learn (or SciPy): ~1.5 s of CPU less in every process that trains on digits."""
    code = (
        "import sys, numpy as np\n"
        "from worker.training.data.builtin import load_digits\n"
        "raw = load_digits()\n"
        "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))\n"
        "np.save(sys.argv[1], raw.x); np.save(sys.argv[2], raw.y)\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        x_file, y_file = Path(tmp, "x.npy"), Path(tmp, "y.npy")
        out = subprocess.run(
            [sys.executable, "-c", code, str(x_file), str(y_file)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "[]"  # neither was imported
        x, y = np.load(x_file), np.load(y_file)
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    np.testing.assert_array_equal(x, bunch.images)
    np.testing.assert_array_equal(y, bunch.target)
    assert x.shape == (1797, 8, 8) and y.dtype == np.int64 and set(y.tolist()) == set(range(10))
