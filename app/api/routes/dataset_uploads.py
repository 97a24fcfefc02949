"""Resumable uploads of a data set: announce the file, send its parts at the offset the server
holds (a rerun asks for it and goes on from there), complete: the checksum is verified and the
data set, status ingesting, is queued for the ingest task.

Each part is one request body, held in memory while it goes to the store as one part of a
multipart upload: at most EPOCHAL_MAX_DATASET_PART_BYTES, and no more than
EPOCHAL_MAX_UPLOADS_PER_KEY of one key at once in each API process.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Request, Response, status

from app.api.deps import CurrentKey, SessionDep
from app.api.errors import documented
from app.api.upload_gate import UPLOADS
from app.domain import dataset_uploads as uploads
from app.domain.tables import DatasetUpload
from app.domain.upload_rules import UploadError
from app.schemas.ids import ID_MAX_LENGTH
from app.schemas.resources import DatasetPublic, UploadCreate, UploadPublic
from app.services.dataset_ingest import queue_ingest
from app.storage import get_store
from app.storage.base import MIN_PART_BYTES

router = APIRouter(prefix="/datasets/uploads", tags=["datasets"])
UploadId = Annotated[str, Path(max_length=ID_MAX_LENGTH)]
CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
OFFSET_HEADER = "Upload-Offset"


def public(row: DatasetUpload) -> UploadPublic:
    return UploadPublic.model_validate(
        {
            "id": row.id,
            "name": row.name,
            "filename": row.filename,
            "total_bytes": row.total_bytes,
            "received_bytes": row.received_bytes,
            "min_part_bytes": MIN_PART_BYTES,
            "max_part_bytes": uploads.max_part_bytes(),
            "created_at": row.created_at,
            "updated_at": row.updated_at,
        }
    )


def _refused(exc: UploadError) -> HTTPException:
    headers = None
    if isinstance(exc, uploads.OffsetConflict):
        headers = {OFFSET_HEADER: str(exc.held)}
    return HTTPException(exc.status, exc.detail, headers=headers)


def _visible_or_404(
    session: SessionDep, key: CurrentKey, upload_id: str, lock: bool = False
) -> DatasetUpload:
    row = uploads.get_visible(session, upload_id, key, lock=lock)
    if row is None:
        raise HTTPException(404, f"no upload {upload_id} (completed, aborted or expired)")
    return row


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=UploadPublic,
    operation_id="create_upload",
    responses={507: documented("over the key's EPOCHAL_MAX_STORAGE_BYTES_PER_KEY")},
)
def create_upload(session: SessionDep, key: CurrentKey, body: UploadCreate) -> UploadPublic:
    """Announce a file (size, sha256): its bytes are reserved in the key's quota."""
    form = uploads.UploadForm(
        body.name, body.task, body.filename, body.size, body.sha256, body.format, body.label_column
    )
    try:
        row = uploads.open_upload(session, get_store(), key, form)
    except UploadError as exc:
        raise _refused(exc) from exc
    return public(row)


@router.get("/{upload_id}", response_model=UploadPublic, operation_id="get_upload")
def read_upload(session: SessionDep, key: CurrentKey, upload_id: UploadId) -> UploadPublic:
    """How far an upload is: `offset` is where its next part starts."""
    return public(_visible_or_404(session, key, upload_id))


async def part_body(request: Request, key: CurrentKey) -> AsyncIterator[bytes]:
    """The part, read whole once the key is known; one of the key's upload slots held."""
    if not UPLOADS.take(key.id):
        raise HTTPException(
            429, "this key has its uploads in flight already (EPOCHAL_MAX_UPLOADS_PER_KEY)"
        )
    try:
        limit, data = uploads.max_part_bytes(), bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > limit:
                raise HTTPException(413, f"a part holds at most {limit} bytes")
        yield bytes(data)
    finally:
        UPLOADS.give_back(key.id)


def _range(content_range: str | None, length: int) -> int:
    """The part's offset, from `Content-Range: bytes START-END/TOTAL`."""
    match = CONTENT_RANGE.match(content_range or "")
    if match is None:
        raise HTTPException(422, "a part needs Content-Range: bytes START-END/TOTAL")
    start, end = int(match[1]), int(match[2])
    if end - start + 1 != length:
        raise HTTPException(
            422, f"Content-Range names {end - start + 1} bytes; the body holds {length}"
        )
    return start


@router.put(
    "/{upload_id}",
    response_model=UploadPublic,
    operation_id="put_upload_part",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    },
    responses={
        409: documented("the part does not start at the offset the server holds (Upload-Offset)"),
        429: documented("the key has EPOCHAL_MAX_UPLOADS_PER_KEY uploads in flight already"),
    },
)
def put_part(
    key: CurrentKey,
    upload_id: UploadId,
    data: Annotated[bytes, Depends(part_body)],
    session: SessionDep,  # after the body: a slow sender holds no database slot
    content_range: Annotated[str | None, Header()] = None,
) -> UploadPublic:
    """Send the next part: the body, at the offset named by Content-Range."""
    start = _range(content_range, len(data))
    row = _visible_or_404(session, key, upload_id, lock=True)
    try:
        uploads.add_part(session, get_store(), row, start, data)
    except UploadError as exc:
        session.rollback()
        raise _refused(exc) from exc
    return public(row)


@router.post(
    "/{upload_id}/complete",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetPublic,
    operation_id="complete_upload",
    responses={409: documented("the server does not hold every byte yet (Upload-Offset)")},
)
def complete_upload(session: SessionDep, key: CurrentKey, upload_id: UploadId) -> DatasetPublic:
    """Verify the sha256 and make the data set (status ingesting); 422 on a mismatch, after
    which the upload is gone."""
    row = _visible_or_404(session, key, upload_id, lock=True)
    try:
        dataset = uploads.complete(session, get_store(), row)
    except UploadError as exc:
        raise _refused(exc) from exc
    return DatasetPublic.model_validate(queue_ingest(session, dataset))


@router.delete("/{upload_id}", status_code=status.HTTP_204_NO_CONTENT, operation_id="delete_upload")
def delete_upload(session: SessionDep, key: CurrentKey, upload_id: UploadId) -> Response:
    """Abort an upload: the parts sent are deleted and its bytes leave the quota."""
    uploads.abort(session, get_store(), _visible_or_404(session, key, upload_id, lock=True))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
