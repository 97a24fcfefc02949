"""Uploaded data sets: read without pickle, validate, normalize to one .npz layout, store.

Runs in the API process on the file the multipart parser spooled. Nothing is written under the
data dir until every check passed, and the stored file is written under a temporary name and
renamed, so a failed or interrupted upload leaves nothing behind (RELIABILITY.md P33, P44, P45).
The stored layout is what worker.training.data.uploads reads: `x` (uint8 or float32 values;
int32 token ids for an upload of kind tokens), `y` (int64 class indices or float32 targets),
optionally `x_test` and `y_test`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from app.domain.job_files import upload_path
from app.schemas.graph.ops.embedding import MAX_VOCAB

ARRAYS = ("x", "y", "x_test", "y_test")
ZIP_MAGIC = b"PK\x03\x04"
MAX_CLASSES = 1000  # the bound the job spec puts on synthetic classes
MAX_SAMPLE_DIMS = 3  # (features,), (H, W) or (H, W, C)
TOKEN_DTYPE = np.int32  # x of kind tokens, as stored: an embedding's ids
HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


class UploadError(Exception):
    """The upload is refused; `status` is the HTTP status, the message says why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class Arrays:
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None


@dataclass
class Summary:
    """What the dataset resource shows about the stored arrays."""

    shape: list[int]
    dtype: str
    samples: int
    test_samples: int | None
    classes: int | None
    vocab: int | None = None  # kind tokens: max token id + 1 over x and x_test


def sniff_format(file: BinaryIO, filename: str) -> str:
    """ "npz" for a zip archive, "csv" for a .csv name; anything else is refused."""
    file.seek(0)
    head = file.read(4)
    file.seek(0)
    if head == ZIP_MAGIC:
        return "npz"
    if filename.lower().endswith(".csv") and b"\0" not in head:
        return "csv"
    raise UploadError(422, "the file is neither an .npz archive (numpy.savez) nor a .csv file")


def _declared(archive: zipfile.ZipFile, member: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype the .npy header promises, read before any array is allocated."""
    with archive.open(member) as f:
        version = np.lib.format.read_magic(f)
        reader = HEADER_READERS.get(version)
        if reader is None:
            raise UploadError(422, f"{member}: .npy format version {version} is not supported")
        shape, _, dtype = reader(f)
    if dtype.hasobject:
        raise UploadError(
            422, f"{member} holds Python objects, which need pickle; upload numeric arrays only"
        )
    return tuple(int(n) for n in shape), dtype


def stored_itemsize(name: str, dtype: np.dtype, task: str) -> int:
    """Bytes per value once stored: x as uint8 or float32, y as int64 classes or float32."""
    if name.startswith("x"):
        return 1 if dtype == np.uint8 else 4
    return 4 if task == "regression" else 8


def _members(archive: zipfile.ZipFile) -> list[str]:
    """The archive's .npy members, checked to be x, y[, x_test, y_test]."""
    members = [i.filename for i in archive.infolist()]
    names = [m.removesuffix(".npy") for m in members]
    unknown = sorted(set(names) - set(ARRAYS))
    if unknown or len(set(names)) != len(members) or not all(m.endswith(".npy") for m in members):
        raise UploadError(
            422,
            f"unexpected entries {unknown or members}; an upload holds the arrays "
            "x and y, and optionally x_test and y_test",
        )
    for required in ("x", "y"):
        if required not in names:
            raise UploadError(422, f"the archive has no array {required!r}")
    if ("x_test" in names) != ("y_test" in names):
        raise UploadError(422, "x_test and y_test come together: give both or neither")
    return members


def npz_stored_bytes(file: BinaryIO, task: str) -> int:
    """Bytes the arrays will take once converted and stored, from the .npy headers alone
    (so a small compressed file that would expand to gigabytes is refused before loading)."""
    file.seek(0)
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UploadError(422, f"not a readable .npz (zip) archive: {exc}") from exc
    with archive:
        members = _members(archive)
        try:
            declared = {m.removesuffix(".npy"): _declared(archive, m) for m in members}
        except (ValueError, OSError, zipfile.BadZipFile) as exc:
            raise UploadError(422, f"not a valid .npz archive: {exc}") from exc
    return sum(
        int(np.prod(shape, dtype=np.int64)) * stored_itemsize(name, dtype, task)
        for name, (shape, dtype) in declared.items()
    )


def csv_stored_bytes(file: BinaryIO) -> int:
    """An upper bound on the stored arrays of a CSV (rows x columns as float32, y as int64),
    counted by streaming the file before it is parsed."""
    file.seek(0)
    header = file.readline()
    columns, rows, last = header.count(b",") + 1, 0, b"\n"
    while chunk := file.read(1 << 20):
        rows += chunk.count(b"\n")
        last = chunk
    if rows == 0 or not last.endswith(b"\n"):
        rows += 1  # the last row needs no newline
    file.seek(0)
    return rows * (columns * 4 + 8)


def read_npz(file: BinaryIO) -> Arrays:
    """The arrays x, y[, x_test, y_test] of an .npz, loaded with allow_pickle=False (check
    npz_stored_bytes against the limits first)."""
    file.seek(0)
    with zipfile.ZipFile(file) as archive:
        names = [m.removesuffix(".npy") for m in _members(archive)]
    return _load_arrays(file, names)


def _load_arrays(file: BinaryIO, names: list[str]) -> Arrays:
    file.seek(0)
    try:
        with np.load(file, allow_pickle=False) as npz:
            loaded = {name: np.asarray(npz[name]) for name in names}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UploadError(422, f"the .npz archive cannot be read: {exc}") from exc
    return Arrays(**loaded)


def read_csv(file: BinaryIO, label_column: str) -> Arrays:
    """A CSV with a header row; every other cell numeric; `label_column` is y."""
    file.seek(0)
    text = io.TextIOWrapper(file, encoding="utf-8-sig", newline="")
    try:
        header = [name.strip() for name in next(csv.reader(text), [])]
        if not header:
            raise UploadError(422, "the CSV file is empty; it needs a header row")
        if header.count(label_column) != 1:
            shown = ", ".join(header[:20]) + (", …" if len(header) > 20 else "")
            raise UploadError(
                422, f"label_column {label_column!r} must name exactly one column of: {shown}"
            )
        # float32 straight away: training uses it, and it halves the peak memory.
        data = np.loadtxt(text, delimiter=",", dtype=np.float32, ndmin=2, quotechar='"')
    except UnicodeDecodeError as exc:
        raise UploadError(422, f"the CSV file is not UTF-8 text: {exc}") from exc
    except ValueError as exc:
        raise UploadError(422, f"the CSV must be numeric below its header: {exc}") from exc
    finally:
        text.detach()
    if data.shape[0] == 0:
        raise UploadError(422, "the CSV file has a header but no rows")
    if data.shape[1] != len(header):
        raise UploadError(422, f"the header has {len(header)} columns, the rows {data.shape[1]}")
    label = header.index(label_column)
    return Arrays(np.delete(data, label, axis=1), data[:, label])


def _first_bad(a: np.ndarray) -> int | None:
    """Index of the first sample with a NaN or infinite value, if any."""
    if a.dtype.kind != "f":
        return None
    bad = np.flatnonzero(~np.isfinite(a.reshape(len(a), -1)).all(axis=1))
    return int(bad[0]) if len(bad) else None


def _features(a: np.ndarray, name: str) -> np.ndarray:
    if a.dtype.kind not in "biuf":
        raise UploadError(422, f"{name} has dtype {a.dtype}; only numeric arrays are accepted")
    if not 2 <= a.ndim <= MAX_SAMPLE_DIMS + 1 or a.size == 0:
        raise UploadError(
            422,
            f"{name} must have shape (samples, features) or (samples, H, W[, C]) and not be "
            f"empty; it has shape {a.shape}",
        )
    with np.errstate(over="ignore"):  # values past float32's range become inf: caught below
        out = a if a.dtype == np.uint8 else a.astype(np.float32)  # what training reads
    if (bad := _first_bad(out)) is not None:
        raise UploadError(422, f"{name} has a NaN or infinite value (as float32) at sample {bad}")
    return out


def _tokens(a: np.ndarray, name: str) -> np.ndarray:
    """Token ids (samples, steps), whole numbers 0 … MAX_VOCAB - 1, as TOKEN_DTYPE."""
    if a.dtype.kind not in "iu":
        raise UploadError(
            422, f"{name} has dtype {a.dtype}; kind tokens needs integer token ids (.npz)"
        )
    if a.ndim != 2 or a.size == 0:
        raise UploadError(
            422,
            f"{name} must have shape (samples, steps) for kind tokens and not be empty; it has "
            f"shape {a.shape}",
        )
    low, high = int(a.min()), int(a.max())
    if low < 0 or high >= MAX_VOCAB:
        raise UploadError(
            422, f"{name} must hold token ids 0 … {MAX_VOCAB - 1}; found {low} … {high}"
        )
    return a.astype(TOKEN_DTYPE)


def _labels(a: np.ndarray, name: str, task: str, samples: int) -> np.ndarray:
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1 or a.dtype.kind not in "biuf":
        raise UploadError(
            422, f"{name} must hold one number per sample; it has shape {a.shape}, dtype {a.dtype}"
        )
    if len(a) != samples:
        x_name = name.replace("y", "x")
        raise UploadError(422, f"{name} has {len(a)} labels but {x_name} has {samples} samples")
    with np.errstate(over="ignore"):
        as_f32 = a.astype(np.float32) if a.dtype.kind == "f" else a
    if (bad := _first_bad(as_f32)) is not None:
        raise UploadError(422, f"{name} has a NaN or infinite value (as float32) at sample {bad}")
    if task == "regression":
        return a.astype(np.float32)
    if a.dtype.kind == "f" and not np.array_equal(a, np.round(a)):
        raise UploadError(
            422,
            f"{name} must hold whole-number class indices for task classification "
            "(use task regression for real-valued targets)",
        )
    if a.min() < 0 or a.max() >= MAX_CLASSES:
        raise UploadError(
            422,
            f"{name} must hold class indices 0 … {MAX_CLASSES - 1}; found {a.min()} … {a.max()}",
        )
    return a.astype(np.int64)


def validate(arrays: Arrays, task: str, kind: str = "values") -> tuple[Arrays, Summary]:
    """The arrays in their stored dtypes and what the resource says about them; or UploadError.
    kind values: x holds real values; tokens: token ids (samples, steps)."""
    read_x = _tokens if kind == "tokens" else _features
    x = read_x(arrays.x, "x")
    y = _labels(arrays.y, "y", task, len(x))
    x_test = y_test = None
    if arrays.x_test is not None and arrays.y_test is not None:
        x_test = read_x(arrays.x_test, "x_test")
        if x_test.shape[1:] != x.shape[1:]:
            raise UploadError(
                422, f"x_test samples have shape {x_test.shape[1:]}, x samples {x.shape[1:]}"
            )
        y_test = _labels(arrays.y_test, "y_test", task, len(x_test))
    if len(x) < 2:
        raise UploadError(422, "the training split needs at least 2 samples")
    classes = None
    if task == "classification":
        classes = int(y.max()) + 1
        if len(np.unique(y)) < 2:
            raise UploadError(422, f"y has a single class ({int(y[0])}); at least 2 are needed")
        if y_test is not None and int(y_test.max()) >= classes:
            raise UploadError(
                422, f"y_test has label {int(y_test.max())} but y's labels run 0 … {classes - 1}"
            )
    summary = Summary(
        shape=[int(d) for d in x.shape[1:]],
        dtype=str(x.dtype),
        samples=len(x),
        test_samples=None if x_test is None else len(x_test),
        classes=classes,
        vocab=vocab_of(x, x_test) if kind == "tokens" else None,
    )
    return Arrays(x, y, x_test, y_test), summary


def vocab_of(x: np.ndarray, x_test: np.ndarray | None) -> int:
    """Max token id + 1: the smallest vocab_size an embedding over this data may have."""
    return int(max(x.max(), x_test.max() if x_test is not None else 0)) + 1


def store(arrays: Arrays, data_dir: Path, dataset_id: str) -> Path:
    """Write the normalized .npz atomically (temporary name, then rename)."""
    final = upload_path(data_dir, dataset_id)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    named = {k: getattr(arrays, k) for k in ARRAYS if getattr(arrays, k) is not None}
    try:
        with tmp.open("wb") as f:
            np.savez(f, **named)  # uncompressed: the worker loads it faster
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def sha256_and_size(file: BinaryIO) -> tuple[str, int]:
    """Checksum of the bytes the client sent (compare with `sha256sum FILE`)."""
    file.seek(0)
    digest, size = hashlib.sha256(), 0
    while chunk := file.read(1 << 20):
        digest.update(chunk)
        size += len(chunk)
    file.seek(0)
    return digest.hexdigest(), size
