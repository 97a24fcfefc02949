"""Data sets registered by reference: files the server may read (a path under an allowed root,
or a prefix under the data prefix of the service's own store), ingested by the ingest task
like an upload. Never an arbitrary server path: every refusal is a 422 naming why.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from fastapi import APIRouter, HTTPException, status

from app.api.deps import CurrentKey, SessionDep
from app.core.config import get_settings
from app.domain.data_roots import SOURCE_PATH, check_path, store_key_of
from app.domain.dataset_uploads import AUTO_FORMAT, SOURCE_STORE
from app.domain.tables import Dataset
from app.domain.upload_rules import UploadError
from app.schemas.ids import new_id
from app.schemas.resources import DatasetPublic, ReferenceCreate
from app.services.dataset_ingest import queue_ingest

router = APIRouter(prefix="/datasets/references", tags=["datasets"])


def resolve(source: str) -> str:
    """The data set's source as the ingest reads it (path:… or store:…); UploadError if it
    may not be read."""
    settings = get_settings()
    if source.startswith("s3://"):
        key = store_key_of(source, settings.resolved_store_url, settings.store_data_prefix)
        return SOURCE_STORE + key
    if "://" in source:
        raise UploadError(422, f"{source!r}: a source is a server path or s3://…")
    return SOURCE_PATH + str(check_path(source, settings.data_roots))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetPublic,
    operation_id="create_reference",
)
def create_reference(session: SessionDep, key: CurrentKey, body: ReferenceCreate) -> DatasetPublic:
    """Register files as a data set; it is ingested (status ingesting, then ready or failed)."""
    try:
        source = resolve(body.source)
    except UploadError as exc:
        raise HTTPException(exc.status, exc.detail) from exc
    name = PurePosixPath(body.source.rstrip("/")).name or "data"
    suffix = PurePosixPath(name).suffix.lstrip(".").lower()
    row = Dataset(
        id=new_id(),
        name=body.name or re.sub(r"[^\w.\- ]", "_", PurePosixPath(name).stem)[:128] or "data",
        owner_id=key.id,
        format=body.format or suffix or AUTO_FORMAT,
        task=body.task,
        shape=[],
        dtype="",
        samples=0,
        size_bytes=0,
        checksum="",
        status="ingesting",
        storage="shards",
        source=source,
        label_column=body.label_column,
        progress=0.0,
    )
    session.add(row)
    session.commit()
    return DatasetPublic.model_validate(queue_ingest(session, row))
