"""Checkpoints that are whole or absent, over any store.

A checkpoint is a prefix `<root><name>/` of parts (plain bytes: no pickle on this side) and a
manifest, `manifest.json`, written last: its parts' names, sizes and sha256, the epoch and step,
and when it was made. A prefix without a manifest is a checkpoint still being written, or one
whose writer died; reading one, or one whose part fails its checksum, finds nothing. Names sort
in training order (`epoch-000002-step-000000300`), so the latest is the last one with a manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from app.storage.base import CHUNK_BYTES, ObjectNotFound, Store, check_key, check_prefix

MANIFEST = "manifest.json"
FORMAT = 1


@dataclass(frozen=True)
class PartEntry:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    name: str  # the checkpoint's prefix under the root, without the slash
    epoch: int
    step: int
    created: datetime
    parts: tuple[PartEntry, ...]

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "epoch": self.epoch,
            "step": self.step,
            "created": self.created.isoformat(),
            "parts": [{"name": p.name, "size": p.size, "sha256": p.sha256} for p in self.parts],
        }
        return json.dumps(body, indent=1).encode()

    @classmethod
    def from_json(cls, name: str, raw: bytes) -> Manifest:
        body = json.loads(raw)
        if body.get("format") != FORMAT:
            raise ValueError(f"manifest format {body.get('format')!r}")
        parts = tuple(PartEntry(p["name"], int(p["size"]), p["sha256"]) for p in body["parts"])
        created = datetime.fromisoformat(body["created"])
        return cls(name, int(body["epoch"]), int(body["step"]), created, parts)


def checkpoint_name(epoch: int, step: int) -> str:
    return f"epoch-{epoch:06d}-step-{step:09d}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as src:
        while data := src.read(CHUNK_BYTES):
            digest.update(data)
    return digest.hexdigest()


class CheckpointSets:
    """The checkpoints under `root` (one job's, e.g. `jobs/<id>/checkpoints/`) in `store`."""

    def __init__(self, store: Store, root: str) -> None:
        self.store = store
        self.root = check_prefix(root.rstrip("/") + "/")

    def _key(self, name: str, part: str) -> str:
        return check_key(f"{self.root}{name}/{part}")

    def write(self, epoch: int, step: int, parts: Mapping[str, bytes | Path]) -> Manifest:
        """Store the parts (bytes, or a staged local file streamed), then the manifest."""
        name = checkpoint_name(epoch, step)
        if not parts or MANIFEST in parts:
            raise ValueError(f"a checkpoint needs parts, none named {MANIFEST}")
        # A rewrite (the same step after a resume) is absent until its new manifest lands.
        self.store.delete(self._key(name, MANIFEST))
        entries = []
        for part, data in parts.items():
            key = self._key(name, part)
            if isinstance(data, Path):
                entries.append(PartEntry(part, data.stat().st_size, file_sha256(data)))
                self.store.put_file(key, data)
            else:
                entries.append(PartEntry(part, len(data), hashlib.sha256(data).hexdigest()))
                self.store.put(key, data)
        manifest = Manifest(name, epoch, step, datetime.now(UTC), tuple(entries))
        self.store.put(self._key(name, MANIFEST), manifest.to_json())
        return manifest

    def names(self) -> list[str]:
        """Every checkpoint prefix under the root, whole or not, oldest first."""
        found = {
            info.key.removeprefix(self.root).split("/", 1)[0]
            for info in self.store.list_objects(self.root)
            if "/" in info.key.removeprefix(self.root)
        }
        return sorted(found)

    def manifest(self, name: str) -> Manifest | None:
        """The checkpoint's manifest; None without one (or with one that does not parse)."""
        try:
            return Manifest.from_json(name, self.store.get(self._key(name, MANIFEST)))
        except ObjectNotFound:
            return None
        except (ValueError, KeyError, TypeError):
            return None

    def manifests(self) -> Iterator[Manifest]:
        """The checkpoints that have a manifest, newest first."""
        for name in reversed(self.names()):
            manifest = self.manifest(name)
            if manifest is not None:
                yield manifest

    def latest(self) -> Manifest | None:
        """The newest checkpoint with a manifest (its parts are checked when read)."""
        return next(self.manifests(), None)

    def load(self, name: str) -> dict[str, bytes] | None:
        """The checkpoint's parts, each checked against its manifest; None if any is missing or
        differs, or if it has no manifest."""
        manifest = self.manifest(name)
        if manifest is None:
            return None
        out = {}
        for entry in manifest.parts:
            try:
                data = self.store.get(self._key(name, entry.name))
            except ObjectNotFound:
                return None
            if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
                return None
            out[entry.name] = data
        return out

    def download(self, name: str, folder: Path) -> Manifest | None:
        """Stream the checkpoint's parts into `folder`, checking each; None (and no part left
        in `folder`) if it has no manifest or a part is missing or differs."""
        manifest = self.manifest(name)
        if manifest is None:
            return None
        for entry in manifest.parts:
            if not self._download_part(name, entry, folder / entry.name):
                for other in manifest.parts:
                    (folder / other.name).unlink(missing_ok=True)
                return None
        return manifest

    def _download_part(self, name: str, entry: PartEntry, target: Path) -> bool:
        digest, size = hashlib.sha256(), 0
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(target, "wb") as out:
                for data in self.store.iter_bytes(self._key(name, entry.name)):
                    digest.update(data)
                    size += len(data)
                    out.write(data)
        except ObjectNotFound:
            return False
        return size == entry.size and digest.hexdigest() == entry.sha256

    def load_latest(self) -> tuple[Manifest, dict[str, bytes]] | None:
        """The newest checkpoint whose parts all pass their checksums, and its parts."""
        for manifest in self.manifests():
            parts = self.load(manifest.name)
            if parts is not None:
                return manifest, parts
        return None

    def delete(self, name: str) -> int:
        """Remove a checkpoint: the manifest first, so it is never whole with parts missing."""
        self.store.delete(self._key(name, MANIFEST))
        return self.store.delete_prefix(f"{self.root}{name}/")
