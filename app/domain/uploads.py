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
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from app.domain.job_files import upload_path
from app.domain.upload_rules import ARRAYS, MAX_SAMPLE_DIMS, TOKEN_DTYPE, Plan, UploadError
from app.schemas.graph.ops.embedding import MAX_VOCAB

ZIP_MAGIC = b"PK\x03\x04"
MAX_CLASSES = 1000  # the bound the job spec puts on synthetic classes
MAX_CSV_HEADER_BYTES = 4 * 2**20


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


def plan_csv(file: BinaryIO) -> Plan:
    """An upper bound on a CSV's arrays (rows x columns as float32, y as int64), counted by
    streaming the file before it is parsed."""
    file.seek(0)
    header = file.readline(MAX_CSV_HEADER_BYTES + 1)
    if len(header) > MAX_CSV_HEADER_BYTES:
        raise UploadError(422, f"the CSV header row is over {MAX_CSV_HEADER_BYTES} bytes")
    columns, rows, last = header.count(b",") + 1, 0, b"\n"
    while chunk := file.read(1 << 20):
        rows += chunk.count(b"\n")
        last = chunk
    if rows == 0 or not last.endswith(b"\n"):
        rows += 1  # the last row needs no newline
    file.seek(0)
    size = rows * (columns * 4 + 8)
    return Plan(size, size)  # parsed straight to float32: loading costs what storing does


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
    except csv.Error as exc:  # a field over csv's limit (128 KiB), a stray quote
        raise UploadError(422, f"the CSV file cannot be read: {exc}") from exc
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
