"""Resumable uploads of a data set: a multipart upload in the store, one part a request, each
at the offset the server holds; completed, the checksum is verified and a Dataset made that
the ingest task then turns into shards.

Parts go straight to the store as they arrive (app.storage.base's multipart upload), so the
API holds one part at a time, never the file. Every part but the last holds at least
MIN_PART_BYTES (S3's floor). The row is locked while a part is stored: two requests sending
the same offset cannot both land.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.domain import datasets
from app.domain.keys import Caller
from app.domain.tables import Dataset, DatasetUpload, utcnow
from app.domain.upload_rules import UploadError
from app.schemas.ids import new_id
from app.storage.base import MIN_PART_BYTES, ObjectNotFound, PartInfo, Store

UPLOADS_PREFIX = "dataset-uploads/"  # what the store's own cleaner leaves to the expiry
MAX_PARTS = 10_000  # S3's bound
SOURCE_STORE = "store:"  # a Dataset's source: a key (or prefix) in the service's store
AUTO_FORMAT = "auto"  # no format named: the ingest tells it from the source


class OffsetConflict(UploadError):
    """A part sent at another offset than the server holds (HTTP 409, with the offset)."""

    def __init__(self, held: int, sent: int) -> None:
        super().__init__(
            409,
            f"the server holds {held} bytes of this upload; send the part at offset {held}, "
            f"not {sent}",
        )
        self.held = held


@dataclass(frozen=True)
class UploadForm:
    """What the client says before sending a byte."""

    name: str
    task: str
    filename: str
    total_bytes: int
    sha256: str
    format: str | None = None
    label_column: str | None = None


def clean_filename(filename: str) -> str:
    """The file's name as a store key's last part (its suffix names the format)."""
    name = re.sub(r"[^\w.\-]", "_", PurePath(filename).name)[-128:].lstrip(".")
    return name or "upload"


def open_upload(session: Session, store: Store, key: Caller, form: UploadForm) -> DatasetUpload:
    """Reserve the file's bytes in the key's quota and open a multipart upload: the row."""
    why = datasets.over_quota(session, key.id, form.total_bytes, "this upload needs")
    if why is not None:
        session.rollback()
        raise UploadError(507, why)
    upload_id = new_id()
    store_key = f"{UPLOADS_PREFIX}{upload_id}/{clean_filename(form.filename)}"
    row = DatasetUpload(
        id=upload_id,
        owner_id=key.id,
        name=form.name,
        task=form.task,
        format=form.format,
        label_column=form.label_column,
        filename=clean_filename(form.filename),
        total_bytes=form.total_bytes,
        sha256=form.sha256.lower(),
        store_key=store_key,
        store_upload_id=store.start_upload(store_key),
        parts=[],
        received_bytes=0,
    )
    session.add(row)
    session.commit()
    return row


def get_visible(
    session: Session, upload_id: str, key: Caller, lock: bool = False
) -> DatasetUpload | None:
    """The upload if it exists and the key may see it (its owner, or an admin)."""
    query = select(DatasetUpload).where(DatasetUpload.id == upload_id)
    if not key.is_admin:
        query = query.where(DatasetUpload.owner_id == key.id)
    return session.scalars(query.with_for_update() if lock else query).first()


def add_part(session: Session, store: Store, row: DatasetUpload, start: int, data: bytes) -> None:
    """Store `data` as the next part, if it starts at the held offset and fits the file.
    `row` is locked by the caller."""
    if start != row.received_bytes:
        raise OffsetConflict(row.received_bytes, start)
    end = start + len(data)
    if not data or end > row.total_bytes:
        raise UploadError(
            422,
            f"a part of {len(data)} bytes at offset {start} does not fit the "
            f"{row.total_bytes} bytes announced",
        )
    if end < row.total_bytes and len(data) < MIN_PART_BYTES:
        raise UploadError(
            422,
            f"every part but the last must hold at least {MIN_PART_BYTES} bytes; this one "
            f"holds {len(data)}",
        )
    if len(row.parts) >= MAX_PARTS:
        raise UploadError(422, f"an upload has at most {MAX_PARTS} parts; send larger ones")
    part = store.upload_part(row.store_key, row.store_upload_id, len(row.parts) + 1, data)
    row.parts = [*row.parts, [part.number, part.etag, len(data)]]
    row.received_bytes = end
    row.updated_at = utcnow()
    session.commit()


def _sha256_of(store: Store, key: str) -> str:
    digest = hashlib.sha256()
    for chunk in store.iter_bytes(key):
        digest.update(chunk)
    return digest.hexdigest()


def _joined(store: Store, key: str, total_bytes: int) -> bool:
    """Whether the store holds the upload's whole file at `key`."""
    try:
        return store.head(key).size == total_bytes
    except ObjectNotFound:
        return False


def complete(session: Session, store: Store, row: DatasetUpload) -> Dataset:
    """Join the parts, verify the checksum, and make the data set (status ingesting) in the
    upload's place. A mismatch deletes what was sent: the file must be sent again.

    The row's lock is let go while the whole file is read for its checksum (longer than a
    transaction may sit idle); a second request completing the same upload meanwhile finds
    the store's upload closed, or the row gone."""
    if row.received_bytes != row.total_bytes:
        raise OffsetConflict(row.received_bytes, row.total_bytes)
    upload_id, expected, total = row.id, row.sha256, row.total_bytes
    parts = [PartInfo(number, etag) for number, etag, _ in row.parts]
    row.updated_at = utcnow()  # not expired while it is read
    store_key, store_upload_id = row.store_key, row.store_upload_id
    session.commit()
    try:
        store.complete_upload(store_key, store_upload_id, parts)
    except ObjectNotFound as exc:
        # Joined already: by another request, or by one whose answer the store's death (or
        # the API's) lost. A whole file in the store is checked as one joined here.
        if not _joined(store, store_key, total):
            raise UploadError(409, "this upload is being completed by another request") from exc
    try:
        got = _sha256_of(store, store_key)
    except ObjectNotFound as exc:  # another request found a mismatch and deleted it
        raise UploadError(409, "this upload was completed by another request") from exc
    held = session.get(DatasetUpload, upload_id, with_for_update=True)
    if held is None:
        raise UploadError(409, "this upload was completed by another request")
    if got != expected:
        store.delete(store_key)
        session.delete(held)
        session.commit()
        raise UploadError(
            422,
            f"the bytes received have sha256 {got}, not the {expected} announced; the "
            "upload is discarded, start it again",
        )
    dataset = _ingesting(held)
    session.add(dataset)
    session.delete(held)
    session.commit()
    return dataset


def _ingesting(row: DatasetUpload) -> Dataset:
    """The data set a completed upload becomes, waiting for its ingest."""
    return Dataset(
        id=new_id(),
        name=row.name,
        owner_id=row.owner_id,
        format=row.format or PurePath(row.filename).suffix.lstrip(".").lower() or AUTO_FORMAT,
        task=row.task,
        shape=[],
        dtype="",
        samples=0,
        size_bytes=row.total_bytes,
        checksum=row.sha256,
        status="ingesting",
        storage="shards",
        source=SOURCE_STORE + row.store_key,
        label_column=row.label_column,
        progress=0.0,
    )


def abort(session: Session, store: Store, row: DatasetUpload) -> None:
    """Drop the upload and the parts the store holds."""
    try:
        store.abort_upload(row.store_key, row.store_upload_id)
    except ObjectNotFound:  # aborted by another process meanwhile
        pass
    session.delete(row)
    session.commit()


def expire(session: Session, store: Store, older_than: datetime) -> list[str]:
    """Abort the uploads no part has reached since `older_than`, and the store's multipart
    uploads under UPLOADS_PREFIX that no row holds (a process died between the two); the
    store keys."""
    query = select(DatasetUpload).where(DatasetUpload.updated_at < older_than)
    expired = []
    for row in session.scalars(query.limit(1000)).all():
        expired.append(row.store_key)
        abort(session, store, row)
    live = set(session.scalars(select(DatasetUpload.store_upload_id)))
    for upload in store.list_uploads(UPLOADS_PREFIX):
        if upload.initiated < older_than and upload.upload_id not in live:
            try:
                store.abort_upload(upload.key, upload.upload_id)
            except ObjectNotFound:
                continue
            expired.append(upload.key)
    return expired


def max_part_bytes() -> int:
    return get_settings().max_dataset_part_bytes
