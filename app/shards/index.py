"""A data set's index: `index.json` beside its shards, written after every shard is stored.

    {"format": "epochal-shards", "format_version": 1,
     "schema": {"x_shape": [28, 28], "x_dtype": "|u1", "y_kind": "class"},
     "classes": 10, "class_names": ["T-shirt", ...] or null,
     "rows": 60000, "bytes": <all shards>, "record_bytes": 792,
     "shards": [{"name": "shard-000000.npy", "rows": 20000, "bytes": 15840128,
                 "offset": 128, "sha256": "<of the shard's bytes>"}, ...],
     "version": "<sha256 of this JSON without the version, keys sorted, no spaces>"}

The version is a content hash: it covers each shard's sha256, so two data sets with one version
hold the same bytes. Global sample ids run over the shards in index order: shard 0's rows are
0 .. rows-1, shard 1's follow, and so on. Reading the index checks every number against the
others and the version against the body, so a reader never trusts a half-written or edited one.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.shards.layout import Schema, ShardError
from app.storage.base import ObjectNotFound, Store, check_key

INDEX = "index.json"
FORMAT = "epochal-shards"
FORMAT_VERSION = 1
SHA256 = re.compile(r"[0-9a-f]{64}")
SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_CLASSES = 1_000_000


class IndexMissing(ShardError):
    """No index under the prefix: never ingested, still ingesting, or failed (no index is
    ever written for a failed ingest)."""


@dataclass(frozen=True)
class ShardEntry:
    name: str  # the shard's key under the data set's prefix
    rows: int
    size: int  # bytes of the whole shard ("bytes" in the JSON)
    offset: int  # where its first record begins
    sha256: str  # of the whole shard

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": self.rows,
            "bytes": self.size,
            "offset": self.offset,
            "sha256": self.sha256,
        }


@dataclass(frozen=True)
class ShardIndex:
    schema: Schema
    shards: tuple[ShardEntry, ...]
    classes: int | None  # y_kind class: how many; None for targets
    class_names: tuple[str, ...] | None
    version: str = ""  # filled in by build/from_json: the content hash
    starts: np.ndarray = field(init=False, repr=False, compare=False)  # first id per shard

    def __post_init__(self) -> None:
        rows = np.fromiter((s.rows for s in self.shards), dtype=np.int64, count=len(self.shards))
        object.__setattr__(self, "starts", np.concatenate(([0], np.cumsum(rows))))

    @property
    def rows(self) -> int:
        return int(self.starts[-1])

    @property
    def size(self) -> int:
        return sum(s.size for s in self.shards)

    @property
    def rows_per_shard(self) -> list[int]:
        return [s.rows for s in self.shards]

    @property
    def max_shard_bytes(self) -> int:
        return max(s.size for s in self.shards)

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard number, row within it) of each global sample id."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.rows):
            raise IndexError(f"sample ids run 0 .. {self.rows - 1}")
        shard = np.searchsorted(self.starts, ids, side="right") - 1
        return shard, ids - self.starts[shard]

    def body(self) -> dict[str, Any]:
        """Everything but the version: what the version hashes."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "schema": self.schema.to_json(),
            "classes": self.classes,
            "class_names": None if self.class_names is None else list(self.class_names),
            "rows": self.rows,
            "bytes": self.size,
            "record_bytes": self.schema.record_bytes,
            "shards": [s.to_json() for s in self.shards],
        }

    def to_json(self) -> bytes:
        return json.dumps({**self.body(), "version": self.version}, indent=1).encode()

    @classmethod
    def build(
        cls,
        schema: Schema,
        shards: tuple[ShardEntry, ...],
        classes: int | None,
        class_names: tuple[str, ...] | None,
    ) -> ShardIndex:
        """An index of these shards, its version computed, every number checked."""
        index = cls(schema, shards, classes, class_names)
        index = cls(schema, shards, classes, class_names, content_hash(index.body()))
        index.check()
        return index

    def check(self) -> None:
        """Every number against the others; ShardError naming the first that disagrees."""
        if not self.shards:
            raise ShardError("a data set has at least one shard")
        names = [s.name for s in self.shards]
        if len(set(names)) != len(names) or INDEX in names:
            raise ShardError(f"shard names must be distinct and not {INDEX}")
        for s in self.shards:
            if not SHARD_NAME.fullmatch(s.name):
                raise ShardError(f"shard name {s.name!r} is not a plain file name")
            if s.rows < 1 or s.offset < 1 or s.size != s.offset + s.rows * self.schema.record_bytes:
                raise ShardError(
                    f"shard {s.name}: {s.size} bytes do not hold {s.rows} records of "
                    f"{self.schema.record_bytes} bytes after {s.offset}"
                )
            if not SHA256.fullmatch(s.sha256):
                raise ShardError(f"shard {s.name}: {s.sha256!r} is not a sha256")
        if self.schema.y_kind == "class":
            if not (
                isinstance(self.classes, int)
                and not isinstance(self.classes, bool)
                and 1 <= self.classes <= MAX_CLASSES
            ):
                raise ShardError(f"a class data set has 1 .. {MAX_CLASSES} classes")
            if self.class_names is not None and (
                len(self.class_names) != self.classes
                or not all(isinstance(n, str) for n in self.class_names)
            ):
                raise ShardError(f"class_names has {self.classes} names, one per class")
        elif self.classes is not None or self.class_names is not None:
            raise ShardError("a target data set has no classes")
        if self.version != content_hash(self.body()):
            raise ShardError("the index's version is not the hash of its content")

    @classmethod
    def from_json(cls, raw: bytes) -> ShardIndex:
        """The index in these bytes; ShardError if it is not one or any number disagrees."""
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ShardError("an index is a JSON object")
            if body.get("format") != FORMAT or body.get("format_version") != FORMAT_VERSION:
                raise ShardError(
                    f"not an index of format {FORMAT} {FORMAT_VERSION}: "
                    f"{body.get('format')!r} {body.get('format_version')!r}"
                )
            schema = Schema.from_json(body["schema"])
            shards = tuple(
                ShardEntry(s["name"], s["rows"], s["bytes"], s["offset"], s["sha256"])
                for s in body["shards"]
            )
            names = body["class_names"]
            index = cls(
                schema,
                shards,
                body["classes"],
                None if names is None else tuple(names),
                body["version"],
            )
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise ShardError(f"not a readable index: {exc!r}") from exc
        if not all(
            isinstance(v, int) and not isinstance(v, bool)
            for s in shards
            for v in (s.rows, s.size, s.offset)
        ):
            raise ShardError("shard rows, bytes and offsets are whole numbers")
        index.check()
        if (body.get("rows"), body.get("bytes"), body.get("record_bytes")) != (
            index.rows,
            index.size,
            schema.record_bytes,
        ):
            raise ShardError("the index's totals are not the sums of its shards")
        return index


def content_hash(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def dataset_prefix(dataset_id: str, part: str = "train") -> str:
    """Where a sharded data set's part lives in the service's store: `train` (what jobs train
    and validate on) and, where the data set has one, `test`. The API writes there, the worker
    reads there; nothing else names the layout."""
    if part not in ("train", "test"):
        raise ShardError(f"data set part {part!r} is not train or test")
    return check_key(f"datasets/{dataset_id}/{part}")


def upload_key(dataset_id: str) -> str:
    """Where a one-request upload's .npz lives in the store, when the store is not the
    artifacts directory: a worker on another machine fetches it from there."""
    return check_key(f"datasets/{dataset_id}/upload.npz")


def shard_key(prefix: str, name: str) -> str:
    """The store key of a file of the data set under `prefix`."""
    return check_key(f"{prefix.strip('/')}/{name}")


def read_index(store: Store, prefix: str) -> ShardIndex:
    """The data set's index; IndexMissing if none (not ready), ShardError if it is not sound."""
    try:
        raw = store.get(shard_key(prefix, INDEX))
    except ObjectNotFound as exc:
        raise IndexMissing(f"{prefix}: no {INDEX}: the data set is not ingested (yet)") from exc
    return ShardIndex.from_json(raw)
