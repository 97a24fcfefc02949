"""A predict request's rows, from JSON (`{"inputs": [[...], ...]}`) or an `.npy` body, checked
against the model card's row shape before anything runs: finite numbers, at most `max_rows`.

An `.npy` header is read and checked before any array is allocated (numpy would otherwise
allocate whatever shape the header claims), and never with pickle.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy_format

NPY_TYPES = ("application/x-npy", "application/octet-stream")
MAX_NPY_HEADER = 10_000


class InputError(ValueError):
    """Inputs that do not fit the model: answered 422 with this message."""


@dataclass(frozen=True)
class RowSpec:
    """What a request must hold: rows of `row_shape`, 1 to `max_rows` of them (token ids
    below `vocab` for a model over token ids)."""

    row_shape: tuple[int, ...]
    max_rows: int
    vocab: int | None = None

    @property
    def expected(self) -> str:
        dims = ", ".join(["N", *map(str, self.row_shape)])
        return f"expected an array of shape [{dims}] of numbers, 1 <= N <= {self.max_rows}"

    def error(self, what: str) -> InputError:
        return InputError(f"{what}; {self.expected}")

    def check_shape(self, shape: tuple[int, ...]) -> None:
        if len(shape) == 0 or tuple(shape[1:]) != self.row_shape:
            raise self.error(f"inputs have shape {list(shape)}")
        if not 1 <= shape[0] <= self.max_rows:
            raise self.error(f"inputs have {shape[0]} rows")


def is_npy(content_type: str) -> bool:
    """Whether the body is an .npy array (else it is read as JSON)."""
    return content_type.split(";", 1)[0].strip().lower() in NPY_TYPES


def parse_rows(body: bytes, content_type: str, spec: RowSpec) -> np.ndarray:
    """The request's rows as a C-contiguous float32 array [N, *row_shape]."""
    array = _from_npy(body, spec) if is_npy(content_type) else _from_json(body, spec)
    if array.dtype.kind not in "iuf":
        raise spec.error(f"inputs must be numbers, not {array.dtype}")
    spec.check_shape(tuple(array.shape))
    with np.errstate(over="ignore", invalid="ignore"):  # too large for float32: inf, refused
        batch = array.astype(np.float32)
    if not np.isfinite(batch).all():  # also catches values too large for float32
        raise InputError("inputs must be finite: no NaN or infinity, |x| below 3.4e38")
    if spec.vocab is not None and not _token_ids(batch, spec.vocab):
        raise spec.error(f"inputs must be token ids: whole numbers 0 … {spec.vocab - 1}")
    return np.ascontiguousarray(batch)


def _token_ids(batch: np.ndarray, vocab: int) -> bool:
    """Whole numbers in range: model.onnx's Gather would fail on others, or wrap negatives."""
    return bool((batch >= 0).all() and (batch < vocab).all() and (batch == np.round(batch)).all())


def _from_json(body: bytes, spec: RowSpec) -> np.ndarray:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise spec.error(f"the body is not JSON ({exc})") from None
    rows = document.get("inputs") if isinstance(document, dict) else None
    if not isinstance(rows, list):
        raise spec.error('send {"inputs": [[...], ...]}')
    if not 1 <= len(rows) <= spec.max_rows:  # before numpy converts them
        raise spec.error(f"inputs have {len(rows)} rows")
    try:
        array = np.asarray(rows)
    except (ValueError, TypeError, OverflowError):  # ragged lists
        raise spec.error("inputs are not a regular array") from None
    if array.dtype.kind == "b":  # JSON true/false are not numbers here
        raise spec.error("inputs must be numbers, not booleans")
    return array


def _from_npy(body: bytes, spec: RowSpec) -> np.ndarray:
    stream = io.BytesIO(body)
    try:
        version = npy_format.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"unsupported .npy version {version}")
        reader = npy_format.read_array_header_1_0
        if version == (2, 0):
            reader = npy_format.read_array_header_2_0
        shape, fortran, dtype = reader(stream, max_header_size=MAX_NPY_HEADER)
    except (ValueError, TypeError, SyntaxError) as exc:
        raise spec.error(f"the body is not a .npy array ({exc})") from None
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "iuf":
        raise spec.error(f"inputs must be numbers, not {dtype}")
    spec.check_shape(tuple(shape))
    data = stream.read()
    if len(data) != math.prod(shape) * dtype.itemsize:
        raise spec.error(
            f"the .npy body holds {len(data)} bytes of data, not {list(shape)} {dtype}"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
