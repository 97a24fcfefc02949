"""What a dead writer leaves in a store, removed: checkpoint prefixes that never got their
manifest, and multipart uploads never completed (S3 keeps and bills their parts until aborted).

Both wait out a grace period first: a prefix or an upload younger than that may belong to a
writer that is still at work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from app.storage.base import ObjectNotFound, Store
from app.storage.checkpoint_sets import MANIFEST, CheckpointSets

GRACE = timedelta(hours=1)  # far longer than one checkpoint takes to upload


@dataclass
class Cleaned:
    prefixes: list[str] = field(default_factory=list)  # checkpoint names removed
    uploads: list[str] = field(default_factory=list)  # keys whose stale upload was aborted


def remove_partial_checkpoints(sets: CheckpointSets, older_than: datetime) -> list[str]:
    """Remove the checkpoints under `sets` that have no manifest and no object written since
    `older_than`; their names."""
    newest: dict[str, datetime] = {}
    whole: set[str] = set()
    for info in sets.store.list_objects(sets.root):
        name, sep, part = info.key.removeprefix(sets.root).partition("/")
        if not sep:
            continue
        if part == MANIFEST:
            whole.add(name)
        newest[name] = max(newest.get(name, info.modified), info.modified)
    removed = []
    for name, when in sorted(newest.items()):
        if name not in whole and when < older_than:
            sets.store.delete_prefix(f"{sets.root}{name}/")
            removed.append(name)
    return removed


def abort_stale_uploads(
    store: Store, prefix: str, older_than: datetime, skip: str | None = None
) -> list[str]:
    """Abort the multipart uploads under `prefix` started before `older_than`, but those
    under `skip` (whose owner expires them by its own rule); their keys."""
    aborted = []
    for upload in store.list_uploads(prefix):
        if skip is not None and upload.key.startswith(skip):
            continue
        if upload.initiated < older_than:
            try:
                store.abort_upload(upload.key, upload.upload_id)
            except ObjectNotFound:  # completed or aborted meanwhile
                continue
            aborted.append(upload.key)
    return aborted


def clean(sets: CheckpointSets, grace: timedelta = GRACE, now: datetime | None = None) -> Cleaned:
    """One round over one checkpoint root: partial checkpoints and stale uploads under it."""
    older_than = (now or datetime.now(UTC)) - grace
    uploads = abort_stale_uploads(sets.store, sets.root, older_than)
    return Cleaned(remove_partial_checkpoints(sets, older_than), uploads)
