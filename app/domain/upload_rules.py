"""What each array of an uploaded data set may be, checked on its header before it is loaded:
a plain numeric dtype, a shape, and what it costs as sent and once stored.

A new kind of upload (integer tokens (samples, steps), float sequences (samples, steps,
features)) is a new ArrayRule and an entry in `array_rules`; the readers apply whatever rules
they are given.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ARRAYS = ("x", "y", "x_test", "y_test")
MAX_SAMPLE_DIMS = 3  # (features,), (H, W) or (H, W, C)


class UploadError(Exception):
    """The upload is refused; `status` is the HTTP status, the message says why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass(frozen=True)
class ArrayRule:
    """One array's rule: numeric dtype kinds, how many dimensions (samples first), how many
    values a sample may hold, and its itemsize once stored."""

    kinds: str  # numpy dtype kinds: b bool, i int, u unsigned, f float
    dims: tuple[int, int]  # fewest and most dimensions
    shapes: str  # the shapes allowed, for the message
    stored_itemsize: Callable[[np.dtype], int]
    values_per_sample: int | None = None  # None: any

    def check(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """UploadError when the header alone shows the array cannot be used."""
        if dtype.hasobject:
            raise UploadError(
                422, f"{name} holds Python objects, which need pickle; upload numeric arrays only"
            )
        if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in self.kinds:
            raise UploadError(
                422,
                f"{name} has dtype {dtype.str}; only numeric arrays are accepted (bool, "
                "integers, floats: no strings, records, objects or complex numbers)",
            )
        per_sample = math.prod(shape[1:])
        if not self.dims[0] <= len(shape) <= self.dims[1] or (
            self.values_per_sample is not None and per_sample != self.values_per_sample
        ):
            raise UploadError(422, f"{name} must have shape {self.shapes}; it has {list(shape)}")


FEATURES = ArrayRule(
    "biuf",
    (2, MAX_SAMPLE_DIMS + 1),
    "(samples, features) or (samples, H, W[, C])",
    lambda dtype: 1 if dtype == np.uint8 else 4,  # what training reads: uint8 or float32
)
# x of kind tokens, as stored: an embedding's ids, whatever integer dtype they were sent in
TOKEN_DTYPE = np.dtype(np.int32)
# As FEATURES on the header (validate's own check names what tokens need), stored as int32.
TOKENS = ArrayRule("biuf", FEATURES.dims, FEATURES.shapes, lambda _: TOKEN_DTYPE.itemsize)
CLASSES = ArrayRule("biuf", (1, 2), "(samples,)", lambda _: 8, values_per_sample=1)  # int64
TARGETS = ArrayRule("biuf", (1, 2), "(samples,)", lambda _: 4, values_per_sample=1)  # float32


def array_rules(task: str, kind: str = "values") -> dict[str, ArrayRule]:
    """The rule of each array an upload of `task` and `kind` (values, tokens) may hold."""
    labels = TARGETS if task == "regression" else CLASSES
    x = TOKENS if kind == "tokens" else FEATURES
    return {"x": x, "y": labels, "x_test": x, "y_test": labels}


@dataclass(frozen=True)
class Plan:
    """What loading and storing an upload costs, known before any array is allocated."""

    loaded_bytes: int  # the arrays as sent, in their own dtypes
    stored_bytes: int  # as stored (x as uint8, float32 or int32 tokens; y as int64 or float32)
    members: tuple[zipfile.ZipInfo, ...] = ()  # an .npz's members, checked
