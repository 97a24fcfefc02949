"""A file sent as a resumable upload: announced with its size and sha256, sent in parts at the
offset the server holds, completed. Run again on the same file, it asks the server how far the
last run got and goes on from there.

Which upload a file belongs to is kept in a small state file under the user's cache folder,
keyed by the service, the file's absolute path, size and modification time: an edited file
starts afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from epochal_client.types import ApiError

PART_BYTES = 8 * 2**20
STATE_FILE = "uploads.json"
Progress = Callable[[int, int], None]  # (bytes the server holds, total)


class Transport(Protocol):
    """What this needs of epochal_client.client.Client."""

    url: str

    def _json(self, method: str, path: str, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class UploadFields:
    name: str
    task: str | None = None
    label_column: str | None = None
    format: str | None = None
    filename: str | None = None  # the name the server is told, when not the file's own


def state_path() -> Path:
    """$XDG_CACHE_HOME/epochal/uploads.json (or ~/.cache/…)."""
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "epochal" / STATE_FILE


def _state_key(url: str, path: Path) -> str:
    info = path.stat()
    return f"{url} {path.resolve()} {info.st_size} {info.st_mtime_ns}"


def _load_state() -> dict[str, Any]:
    try:
        state = json.loads(state_path().read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _save_state(state: dict[str, Any]) -> None:
    target = state_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, target)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(PART_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _open(client: Transport, path: Path, fields: UploadFields, key: str) -> dict[str, Any]:
    """The upload the last run on this file left open, or a new one."""
    state = _load_state()
    held = state.get(key)
    if isinstance(held, dict) and isinstance(held.get("id"), str):
        try:
            return dict(client._json("GET", f"/v1/datasets/uploads/{held['id']}"))
        except ApiError as exc:
            if exc.status != 404:  # completed, aborted or expired: start afresh
                raise
    body = {
        "name": fields.name,
        "filename": path.name,
        "size": path.stat().st_size,
        "sha256": sha256_of(path),
        **{k: v for k, v in vars(fields).items() if k != "name" and v is not None},
    }
    upload = dict(client._json("POST", "/v1/datasets/uploads", json=body))
    state[key] = {"id": upload["id"]}
    _save_state(state)
    return upload


def _forget(key: str) -> None:
    state = _load_state()
    if state.pop(key, None) is not None:
        _save_state(state)


def upload(
    client: Transport,
    path: Path,
    fields: UploadFields,
    progress: Progress | None = None,
    part_bytes: int = PART_BYTES,
) -> dict[str, Any]:
    """Send the file (or what the server lacks of it), complete: the data set, as JSON."""
    key = _state_key(client.url, path)
    upload = _open(client, path, fields, key)
    offset, total = int(upload["offset"]), int(upload["size"])
    part_bytes = max(int(upload["min_part_bytes"]), min(part_bytes, int(upload["max_part_bytes"])))
    with path.open("rb") as f:
        while offset < total:
            if progress is not None:
                progress(offset, total)
            f.seek(offset)
            data = f.read(part_bytes)
            headers = {
                "Content-Range": f"bytes {offset}-{offset + len(data) - 1}/{total}",
                "Content-Type": "application/octet-stream",
            }
            upload = _put(client, upload["id"], data, headers)
            offset = int(upload["offset"])
    if progress is not None:
        progress(total, total)
    try:
        dataset = dict(client._json("POST", f"/v1/datasets/uploads/{upload['id']}/complete"))
    except ApiError as exc:
        if exc.status == 422:  # a checksum mismatch: the server discarded the upload
            _forget(key)
        raise
    _forget(key)
    return dataset


def _put(client: Transport, upload_id: str, data: bytes, headers: dict[str, str]) -> Any:
    """The upload after sending one part; after a 409 (another run sent it, or this run's
    answer was lost), the upload as the server holds it, to go on from its offset."""
    try:
        route = f"/v1/datasets/uploads/{upload_id}"
        return client._json("PUT", route, content=data, headers=headers)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return client._json("GET", f"/v1/datasets/uploads/{upload_id}")
