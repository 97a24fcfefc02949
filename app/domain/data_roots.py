"""Which server paths a data set may be registered from: only files and directories under a
root the admin allows (EPOCHAL_DATA_ROOTS), reached without `..` and without a symbolic link
that leads out of every root. The API checks at registration, the ingest again before it reads
(the tree may have changed between the two).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from app.domain.upload_rules import UploadError

SOURCE_PATH = "path:"  # a Dataset's source: a file or directory under an allowed root


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _escaping_link(folder: Path, roots: Sequence[Path]) -> Path | None:
    """The first symbolic link under `folder` whose target lies outside every root."""
    for parent, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            entry = Path(parent) / name
            if entry.is_symlink() and not _inside(entry.resolve(), roots):
                return entry
    return None


def check_path(raw: str, roots: Sequence[Path]) -> Path:
    """The resolved path `raw` names, if it may be read; else UploadError (422) naming why."""
    if not roots:
        raise UploadError(
            422,
            "this server allows no directory to register data sets from (EPOCHAL_DATA_ROOTS "
            "is empty); upload the file instead",
        )
    given = PurePosixPath(raw)
    if not given.is_absolute():
        raise UploadError(422, f"{raw!r} is not an absolute path")
    if ".." in given.parts:
        raise UploadError(422, f"{raw!r} has a '..' part; name the path without one")
    named = [Path(os.path.abspath(root.expanduser())) for root in roots]
    resolved_roots = [root.resolve() for root in named]
    if not _inside(Path(os.path.normpath(raw)), [*named, *resolved_roots]):
        raise UploadError(422, f"{raw!r} is not under an allowed data root (EPOCHAL_DATA_ROOTS)")
    path = Path(raw).resolve()
    if not _inside(path, resolved_roots):
        raise UploadError(422, f"{raw!r} leads out of the allowed data roots by a symbolic link")
    if not path.exists():
        raise UploadError(422, f"{raw!r} does not exist on the server")
    if path.is_dir() and (link := _escaping_link(path, resolved_roots)) is not None:
        inner = link.relative_to(path)
        raise UploadError(
            422, f"{raw!r} holds a symbolic link ({inner}) that leads out of the allowed data roots"
        )
    return path


def store_key_of(source: str, store_url: str, data_prefix: str) -> str:
    """The store key (or prefix) an `s3://bucket/prefix/…` reference names, if it lies in the
    service's store under its data prefix; else UploadError (422) naming why."""
    if not store_url.startswith("s3://"):
        raise UploadError(
            422,
            "the service's store is a directory, not S3: register an s3:// source once "
            "EPOCHAL_STORE_URL is s3://…, or name a path under EPOCHAL_DATA_ROOTS",
        )
    root = store_url.rstrip("/") + "/"
    if not source.startswith(root):
        raise UploadError(422, f"{source!r} is not in the service's store ({root})")
    key = source.removeprefix(root)
    parts = key.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UploadError(422, f"{source!r} is not a clean key: no empty, '.' or '..' part")
    if not key.startswith(data_prefix):
        raise UploadError(
            422,
            f"{source!r} is not under {root}{data_prefix}, where data sets may be "
            "registered from (EPOCHAL_STORE_DATA_PREFIX)",
        )
    return key
