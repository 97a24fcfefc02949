"""The directory store: the embedded default, one file per key under a root folder.

Writes are atomic: bytes go to a temp file under `<root>/.staging/`, are flushed to disk,
then renamed over the key, so a reader sees the old object or the new one, never a part.
A multipart upload is a folder of staged part files there, joined and renamed on completion.
Unlike S3, a key cannot be both an object and a folder (`a` and `a/b`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from stat import S_ISREG
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from app.storage.base import (
    CHUNK_BYTES,
    MIN_PART_BYTES,
    InvalidKey,
    ObjectInfo,
    ObjectNotFound,
    PartInfo,
    StoreError,
    StoreUnavailable,
    UploadInfo,
    check_key,
    check_parts,
    check_prefix,
    check_range,
)

STAGING = ".staging"  # temp files and open uploads; never listed, never a key
UPLOAD_META = "upload.json"
# A folder that went away under us (a network mount), not a missing object.
DOWN = {errno.EIO, errno.ESTALE, errno.ENOTCONN, errno.ETIMEDOUT, errno.EHOSTDOWN}


@contextmanager
def translated(key: str) -> Iterator[None]:
    """OS errors as the store's: a missing file is ObjectNotFound, a dead mount unavailable."""
    try:
        yield
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise ObjectNotFound(key) from exc  # a folder is a prefix, not an object
    except OSError as exc:
        if exc.errno in DOWN:
            raise StoreUnavailable(f"{key}: {exc.strerror}") from exc
        raise


class DirectoryStore:
    """Keys as files under `root` (created on first write)."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()

    @classmethod
    def from_url(
        cls, url: str, endpoint: str | None = None, *, quick: bool = False
    ) -> DirectoryStore:
        """quick is the same store: a local directory answers at once or fails at once."""
        parsed = urlparse(url)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise ValueError(f"not a local file URL: {url!r}")
        return cls(Path(unquote(parsed.path)))

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        if check_key(key).split("/", 1)[0] == STAGING:
            raise InvalidKey(f"{STAGING} is the store's own: {key!r}")
        path = self.root / key
        # A symlink under the root that leads out of it is no object of this store.
        if not path.resolve().is_relative_to(self.root):
            raise ObjectNotFound(key)
        return path

    def _atomic(self, key: str, source: Iterator[bytes]) -> None:
        """Write the chunks to a temp file, flush it to disk, rename it over the key."""
        target = self._path(key)
        tmp = self.root / STAGING / "tmp" / uuid.uuid4().hex
        with translated(key):
            tmp.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(tmp, "wb") as out:
                    for chunk in source:
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())  # else a crash may leave the renamed file empty
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)

    def put(self, key: str, data: bytes) -> None:
        self._atomic(key, iter((data,)))

    def put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as src:
            self._atomic(key, iter(lambda: src.read(CHUNK_BYTES), b""))

    def get(self, key: str) -> bytes:
        with translated(key):
            return self._path(key).read_bytes()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return b"".join(self.iter_bytes(key, start, end))

    def iter_bytes(
        self, key: str, start: int = 0, end: int | None = None, chunk: int = CHUNK_BYTES
    ) -> Iterator[bytes]:
        check_range(start, end)
        with translated(key):
            src = open(self._path(key), "rb")  # here, so a missing key fails on the call
        return _chunks(src, key, start, end, chunk)

    def head(self, key: str) -> ObjectInfo:
        with translated(key):
            stat = self._path(key).stat()
        if not S_ISREG(stat.st_mode):
            raise ObjectNotFound(key)
        return _info(key, stat)

    def list_objects(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        # Walk only the deepest folder the prefix names in full.
        base = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        found: list[tuple[str, os.stat_result]] = []
        with translated(prefix):
            for folder, dirs, files in os.walk(base, onerror=_walk_error):
                if Path(folder) == self.root and STAGING in dirs:
                    dirs.remove(STAGING)
                rel = Path(folder).relative_to(self.root).as_posix()
                for name in files:
                    key = name if rel == "." else f"{rel}/{name}"
                    path = os.path.join(folder, name)
                    if key.startswith(prefix) and not os.path.islink(path):
                        found.append((key, os.stat(path)))
        for key, stat in sorted(found):
            yield _info(key, stat)

    def delete(self, key: str) -> None:
        path = self._path(key)
        with translated(key):
            path.unlink(missing_ok=True)
            _prune_empty(path.parent, self.root)

    def delete_prefix(self, prefix: str) -> int:
        keys = [info.key for info in self.list_objects(prefix)]
        for key in keys:
            self.delete(key)
        return len(keys)

    def _upload(self, upload_id: str) -> Path:
        if not upload_id.isalnum():
            raise ObjectNotFound(f"upload {upload_id!r}")
        return self.root / STAGING / "uploads" / upload_id

    def start_upload(self, key: str) -> str:
        self._path(key)
        upload_id = uuid.uuid4().hex
        folder = self._upload(upload_id)
        meta = {"key": key, "initiated": datetime.now(UTC).isoformat()}
        with translated(key):
            folder.mkdir(parents=True)
            (folder / UPLOAD_META).write_text(json.dumps(meta))
        return upload_id

    def _open_upload(self, key: str, upload_id: str) -> Path:
        folder = self._upload(upload_id)
        try:
            meta = json.loads((folder / UPLOAD_META).read_text())
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"upload {upload_id} of {key}") from exc
        if meta["key"] != key:
            raise ObjectNotFound(f"upload {upload_id} is not of {key}")
        return folder

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> PartInfo:
        folder = self._open_upload(key, upload_id)
        check_parts([PartInfo(number, "")])
        part = folder / f"{number:05d}"
        tmp = part.with_suffix(".tmp")
        with translated(key):
            tmp.write_bytes(data)
            os.replace(tmp, part)
        return PartInfo(number, hashlib.md5(data, usedforsecurity=False).hexdigest())

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[PartInfo]) -> None:
        folder = self._open_upload(key, upload_id)
        check_parts(parts)
        files = [folder / f"{p.number:05d}" for p in parts]
        with translated(key):
            sizes = [f.stat().st_size for f in files]
        if any(size < MIN_PART_BYTES for size in sizes[:-1]):
            raise StoreError(f"{key}: every part but the last must hold {MIN_PART_BYTES} bytes")
        self._atomic(key, _joined(files, [p.etag for p in parts]))
        shutil.rmtree(folder, ignore_errors=True)

    def abort_upload(self, key: str, upload_id: str) -> None:
        shutil.rmtree(self._open_upload(key, upload_id), ignore_errors=True)

    def presigned_get(self, key: str, seconds: int, filename: str, media_type: str) -> str | None:
        return None  # a folder has no URL of its own: the API serves its bytes

    def list_uploads(self, prefix: str = "") -> list[UploadInfo]:
        check_prefix(prefix)
        out = []
        for meta_file in (self.root / STAGING / "uploads").glob(f"*/{UPLOAD_META}"):
            try:
                meta = json.loads(meta_file.read_text())
            except (FileNotFoundError, ValueError):  # completed or aborted meanwhile
                continue
            if meta["key"].startswith(prefix):
                when = datetime.fromisoformat(meta["initiated"])
                out.append(UploadInfo(meta["key"], meta_file.parent.name, when))
        return sorted(out, key=lambda u: (u.key, u.initiated))


def _chunks(src: BinaryIO, key: str, start: int, end: int | None, chunk: int) -> Iterator[bytes]:
    with src, translated(key):
        src.seek(start)
        left = None if end is None else end - start
        while left is None or left > 0:
            data = src.read(chunk if left is None else min(chunk, left))
            if not data:
                return
            left = None if left is None else left - len(data)
            yield data


def _joined(files: list[Path], etags: list[str]) -> Iterator[bytes]:
    """The parts' bytes in order, each checked against the etag its upload answered."""
    for path, etag in zip(files, etags, strict=True):
        digest = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as src:
            while data := src.read(CHUNK_BYTES):
                digest.update(data)
                yield data
        if digest.hexdigest() != etag:
            raise StoreError(f"part {path.name} does not match its etag")


def _walk_error(exc: OSError) -> None:
    """A prefix with no folder lists nothing; any other failure to list is raised."""
    if not isinstance(exc, FileNotFoundError | NotADirectoryError):
        raise exc


def _info(key: str, stat: os.stat_result) -> ObjectInfo:
    return ObjectInfo(key, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC))


def _prune_empty(folder: Path, root: Path) -> None:
    """Remove `folder` and its parents up to `root` while empty: a prefix with no key is gone."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty (or already gone): stop
            return
        folder = folder.parent
