"""One shard's bytes: a `.npy` file (NumPy format 1.0) of fixed-size little-endian records.

A record is a structured item with two fields: `x` (the sample: any shape, one numeric
dtype) and `y` (an int64 class or a float32 target). A shard is

    magic b"\\x93NUMPY" 01 00 | uint16 header length | header dict, space-padded, "\\n" |
    rows x record bytes, packed, C order

so `numpy.load(path, mmap_mode="r")` maps it, any NumPy reads it without pickle, and record i
lies at `offset + i * record_bytes` (one ranged read for a run of rows). The header of every
shard a writer makes has the same length (padded for its largest shard), so the offset is one
number per data set; the index records it per shard all the same.
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

MAGIC = b"\x93NUMPY\x01\x00"
ALIGN = 64  # NumPy pads the header so the data starts aligned
# The sample dtypes a shard holds: numeric, little-endian (or one byte).
X_DTYPES = ("|u1", "|i1", "|b1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8")
YKind = Literal["class", "target"]
Y_DTYPES: dict[str, str] = {"class": "<i8", "target": "<f4"}
MAX_X_DIMS = 8


class ShardError(Exception):
    """A data set's shards or index cannot be written or read as they are; the message says
    which shard (or record) and why."""


class RecordError(ShardError):
    """One record (by its number in the data, from 0) cannot be written; says why."""

    def __init__(self, record: int, why: str) -> None:
        super().__init__(f"record {record}: {why}")
        self.record, self.why = record, why


@dataclass(frozen=True)
class Schema:
    """What every record of a data set is: x's shape and dtype, and y's kind."""

    x_shape: tuple[int, ...]
    x_dtype: str  # numpy's dtype.str: "|u1", "<f4", ...
    y_kind: YKind

    def __post_init__(self) -> None:
        if self.x_dtype not in X_DTYPES:
            raise ShardError(f"x dtype {self.x_dtype!r} is not one of {', '.join(X_DTYPES)}")
        if self.y_kind not in Y_DTYPES:
            raise ShardError(f"y kind {self.y_kind!r} is not class or target")
        if len(self.x_shape) > MAX_X_DIMS or any(
            not isinstance(n, int) or n < 1 for n in self.x_shape
        ):
            raise ShardError(f"x shape {self.x_shape} is not up to {MAX_X_DIMS} sizes >= 1")

    @classmethod
    def of(cls, x_shape: tuple[int, ...], x_dtype: Any, y_kind: YKind) -> Schema:
        """The schema for samples of this shape and dtype (any byte order: stored little)."""
        dtype = np.dtype(x_dtype)
        if dtype.kind not in "biuf" or dtype.fields is not None or dtype.subdtype is not None:
            raise ShardError(f"x dtype {dtype} is not a plain numeric dtype")
        return cls(tuple(int(n) for n in x_shape), dtype.newbyteorder("<").str, y_kind)

    @property
    def x(self) -> np.dtype:
        return np.dtype(self.x_dtype)

    @property
    def y(self) -> np.dtype:
        return np.dtype(Y_DTYPES[self.y_kind])

    @property
    def record(self) -> np.dtype:
        """The structured dtype of one record: packed, x then y."""
        return np.dtype([("x", self.x, self.x_shape), ("y", self.y)])

    @property
    def record_bytes(self) -> int:
        return self.record.itemsize

    def to_json(self) -> dict[str, Any]:
        return {"x_shape": list(self.x_shape), "x_dtype": self.x_dtype, "y_kind": self.y_kind}

    @classmethod
    def from_json(cls, body: Any) -> Schema:
        if not isinstance(body, dict) or set(body) != {"x_shape", "x_dtype", "y_kind"}:
            raise ShardError(f"a schema has x_shape, x_dtype and y_kind: {body!r}")
        shape = body["x_shape"]
        if not isinstance(shape, list):
            raise ShardError(f"x_shape is a list of sizes: {shape!r}")
        return cls(tuple(shape), body["x_dtype"], body["y_kind"])


def header(schema: Schema, rows: int, room_for: int) -> bytes:
    """The .npy header of a shard of `rows` records, as long as the one for `room_for` rows
    (so a writer can reserve it before it knows how many rows its shard will hold)."""
    if not 0 <= rows <= room_for:
        raise ValueError(f"{rows} rows do not fit a header sized for {room_for}")
    descr = np.lib.format.dtype_to_descr(schema.record)
    longest = _dict_text(descr, room_for)
    total = -(-(len(MAGIC) + 2 + len(longest) + 1) // ALIGN) * ALIGN
    text = _dict_text(descr, rows)
    text += " " * (total - len(MAGIC) - 2 - len(text) - 1) + "\n"
    return MAGIC + struct.pack("<H", len(text)) + text.encode("latin1")


def _dict_text(descr: Any, rows: int) -> str:
    return f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': ({rows},), }}"


def parse_header(buf: bytes | bytearray | memoryview, schema: Schema) -> tuple[int, int]:
    """(rows, offset of the first record) of a whole shard's bytes, checked against the schema:
    the magic and version, the record dtype, C order, one dimension, the length."""
    head = bytes(buf[: len(MAGIC) + 2])
    if len(head) < len(MAGIC) + 2 or head[: len(MAGIC)] != MAGIC:
        raise ShardError("not a shard: no .npy format 1.0 magic")
    (length,) = struct.unpack("<H", head[len(MAGIC) :])
    offset = len(MAGIC) + 2 + length
    if len(buf) < offset:
        raise ShardError("the shard ends inside its header")
    try:
        fields = ast.literal_eval(bytes(buf[offset - length : offset]).decode("latin1"))
        dtype = np.lib.format.descr_to_dtype(fields["descr"])
        shape, fortran = fields["shape"], fields["fortran_order"]
    except (ValueError, SyntaxError, TypeError, KeyError) as exc:
        raise ShardError(f"the shard's header does not parse: {exc}") from exc
    if dtype != schema.record or fortran or not (isinstance(shape, tuple) and len(shape) == 1):
        raise ShardError(f"the shard holds {dtype} {shape}, not records of {schema.record}")
    rows = int(shape[0])
    if len(buf) != offset + rows * schema.record_bytes:
        raise ShardError(
            f"the shard holds {len(buf)} bytes; its header promises "
            f"{offset + rows * schema.record_bytes}"
        )
    return rows, offset


def records(buf: bytes | bytearray | memoryview, schema: Schema) -> np.ndarray:
    """A shard's records, a read-only view of `buf` (no copy), its header checked."""
    rows, offset = parse_header(buf, schema)
    out = np.frombuffer(buf, dtype=schema.record, count=rows, offset=offset)
    out.flags.writeable = False
    return out
