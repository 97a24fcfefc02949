"""What every store is: keys to bytes, with ranged reads, listing, deletion and multipart uploads.

A key is a relative POSIX path (`jobs/<id>/model/model.onnx`): no leading slash, no `.` or
`..` part, no empty part. Ranges are half-open, like slices: `get_range(key, 0, 10)` is the
first ten bytes. Deleting a key that does not exist is not an error (S3 behaves so).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

CHUNK_BYTES = 1024 * 1024  # what a streaming read yields at a time
# S3's floor for every part but the last; the directory store enforces it too, so code that
# works on one back-end works on the other.
MIN_PART_BYTES = 5 * 1024 * 1024


class StoreError(Exception):
    """Anything a store refuses or fails to do."""


class StoreUnavailable(StoreError):
    """The store is down or throttling, and retrying with backoff did not help (HTTP: 503)."""


class ObjectNotFound(StoreError):
    """No object (or no multipart upload) by that key."""


class InvalidKey(StoreError, ValueError):
    """A key that is not a clean relative path."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    modified: datetime  # timezone-aware, UTC


@dataclass(frozen=True)
class UploadInfo:
    """An open multipart upload: until completed or aborted, S3 keeps (and bills) its parts."""

    key: str
    upload_id: str
    initiated: datetime  # timezone-aware, UTC


@dataclass(frozen=True)
class PartInfo:
    number: int  # 1..10000
    etag: str


class Store(Protocol):
    """The operations the service needs from a store; see the module's docstring for keys."""

    @property
    def url(self) -> str:
        """Where it stores (no credentials in it)."""
        ...

    def put(self, key: str, data: bytes) -> None: ...

    def put_file(self, key: str, path: Path) -> None:
        """Copy a local file, streamed (S3: in parts when large, so past 5 GB too)."""
        ...

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object, fewer if it ends sooner."""
        ...

    def iter_bytes(
        self, key: str, start: int = 0, end: int | None = None, chunk: int = CHUNK_BYTES
    ) -> Iterator[bytes]:
        """Bytes [start, end) in chunks of at most `chunk`; the object must exist on the call."""
        ...

    def head(self, key: str) -> ObjectInfo: ...

    def list_objects(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with `prefix`, in key order."""
        ...

    def delete(self, key: str) -> None: ...

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under `prefix`; how many."""
        ...

    def start_upload(self, key: str) -> str:
        """Open a multipart upload of `key`; its upload id."""
        ...

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> PartInfo: ...

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[PartInfo]) -> None:
        """The object becomes the parts in order, at once; the upload closes."""
        ...

    def abort_upload(self, key: str, upload_id: str) -> None: ...

    def list_uploads(self, prefix: str = "") -> list[UploadInfo]:
        """The open multipart uploads of keys under `prefix`."""
        ...

    def presigned_get(self, key: str, seconds: int, filename: str, media_type: str) -> str | None:
        """A URL anyone holding it may GET `key` from for `seconds`, served as an attachment
        named `filename`; None when this store cannot hand one out (a directory)."""
        ...


def attachment(filename: str) -> str:
    """A Content-Disposition that names the file (RFC 6266, UTF-8 when not plain ASCII): what
    the API sends with a download, and what a presigned URL asks the store to send."""
    quoted = quote(filename)
    if quoted != filename:
        return f"attachment; filename*=utf-8''{quoted}"
    return f'attachment; filename="{filename}"'


def check_key(key: str) -> str:
    """`key` if it is a clean relative path; InvalidKey otherwise."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InvalidKey(f"not a clean relative key: {key!r}")
    if "\\" in key or "\x00" in key:
        raise InvalidKey(f"not a clean relative key: {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """`prefix` if it is empty or a clean key, optionally ending in a slash."""
    if prefix:
        check_key(prefix.removesuffix("/"))
    return prefix


def check_range(start: int, end: int | None) -> None:
    if start < 0 or (end is not None and end < start):
        raise ValueError(f"not a range: [{start}, {end})")


def check_parts(parts: Sequence[PartInfo]) -> None:
    numbers = [p.number for p in parts]
    ordered = numbers == sorted(set(numbers))
    if not numbers or not ordered or not 1 <= numbers[0] <= numbers[-1] <= 10000:
        raise ValueError(f"parts must be numbered 1..10000, ascending, once each: {numbers}")
