"""A directory sent as one file: packed into an uncompressed tar whose bytes depend only on
the files' names and contents (members sorted by name, mtime 0, owner 0 without names, fixed
modes), so a rerun on the same directory sends the same bytes and resumes the same upload.

The tar is kept in the user's cache folder, keyed by the directory's absolute path, beside the
sizes and modification times of the files it was packed from: a rerun whose directory is
unchanged re-reads it, an edited directory is packed again. It is removed once the upload
completes (`forget`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

from epochal_client.resumable import state_path

FILE_MODE, DIR_MODE = 0o644, 0o755


def _members(root: Path) -> list[Path]:
    """Every folder and file under root (symbolic links followed), sorted by relative name."""
    found = [p for p in root.rglob("*") if p.is_dir() or p.is_file()]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _info(name: str, directory: bool, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode, info.size, info.mtime = (DIR_MODE if directory else FILE_MODE), size, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack(root: Path, target: Path) -> Path:
    """Write the tar of `root` to `target` (through a temporary file renamed into place)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:  # GNU: names of any length
        for path in _members(root):
            name = path.relative_to(root).as_posix()
            if path.is_dir():
                tar.addfile(_info(name, True))
                continue
            with path.open("rb") as data:
                tar.addfile(_info(name, False, os.fstat(data.fileno()).st_size), data)
    os.replace(tmp, target)
    return target


def _listing(root: Path) -> list[list[object]]:
    """What a packed tar was made from: each file's name, size and modification time."""
    listed: list[list[object]] = []
    for path in _members(root):
        if path.is_file():
            info = path.stat()
            listed.append([path.relative_to(root).as_posix(), info.st_size, info.st_mtime_ns])
    return listed


def cache_path(root: Path) -> Path:
    """Where the tar of the directory at `root` is kept: keyed by its absolute path."""
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:32]
    return state_path().parent / "packed" / f"{key}.tar"


def packed(root: Path) -> Path:
    """The tar of the directory: the one packed before if its files are unchanged, else new."""
    target, listing = cache_path(root), _listing(root)
    record = target.with_suffix(".json")
    try:
        same = target.is_file() and json.loads(record.read_text()) == listing
    except (OSError, ValueError):
        same = False
    if not same:
        record.unlink(missing_ok=True)
        pack(root, target)
        record.write_text(json.dumps(listing))
    return target


def forget(root: Path) -> None:
    """Remove the directory's tar and its record: its upload completed."""
    target = cache_path(root)
    target.unlink(missing_ok=True)
    target.with_suffix(".json").unlink(missing_ok=True)
