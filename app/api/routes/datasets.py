"""Uploaded data sets: upload (.npz or CSV), list, read, delete; and the check a job's
`dataset.id` must pass at submit.

The routes are plain `def`: reading and validating arrays is blocking work, so FastAPI runs it
in its thread pool instead of on the event loop.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Annotated, Literal

from fastapi import APIRouter, File, Form, HTTPException, Path, Query, Response, UploadFile, status

from app.api.deps import CurrentKey, SessionDep
from app.api.errors import documented
from app.core.config import get_settings
from app.domain import datasets, npz_reader, uploads
from app.domain.job_files import upload_path
from app.domain.tables import Dataset
from app.schemas.ids import ID_MAX_LENGTH, new_id
from app.schemas.resources import DataKind, DatasetPublic, DatasetsPublic
from app.shards.index import upload_key
from app.storage import get_store
from app.storage.registry import is_artifacts_dir

router = APIRouter(prefix="/datasets", tags=["datasets"])
NAME_PATTERN = r"^[\w.\- ]+$"
DatasetId = Annotated[str, Path(max_length=ID_MAX_LENGTH)]


def _default_name(filename: str | None) -> str:
    stem = PurePath(filename or "upload").stem
    return re.sub(r"[^\w.\- ]", "_", stem)[:128] or "upload"


def _read(
    session: SessionDep,
    key: CurrentKey,
    file: UploadFile,
    size: int,
    form: tuple[str, str | None, str],
) -> tuple[str, uploads.Arrays]:
    """Check the upload's cost from its headers (limits, quota), then parse it."""
    settings = get_settings()
    task, label_column, kind = form
    if size > settings.max_upload_bytes:  # the body limit catches it first; in depth
        raise uploads.UploadError(413, f"the file is over {settings.max_upload_bytes} bytes")
    fmt = uploads.sniff_format(file.file, file.filename or "")
    if fmt == "npz" and label_column is not None:
        raise uploads.UploadError(422, "label_column applies to CSV uploads only")
    if fmt == "csv" and not label_column:
        raise uploads.UploadError(422, "a CSV upload needs label_column: the column holding y")
    if fmt == "csv" and kind == "tokens":  # CSV is read as float32; token ids are integers
        raise uploads.UploadError(422, "kind tokens needs integer token ids (.npz), not a CSV")
    if fmt == "npz":
        plan = npz_reader.plan_npz(file.file, task, kind)
    else:
        plan = uploads.plan_csv(file.file)
    _check_cost(session, key, plan)
    if fmt == "npz":
        return fmt, uploads.Arrays(**npz_reader.read_npz(file.file, plan))
    assert label_column is not None
    return fmt, uploads.read_csv(file.file, label_column)


def _check_cost(session: SessionDep, key: CurrentKey, plan: uploads.Plan) -> None:
    """413 over the per-upload array limit (as sent or once stored), 507 over the key's
    storage quota (both named)."""
    limit = get_settings().max_upload_array_bytes
    if plan.loaded_bytes > limit:
        raise uploads.UploadError(
            413,
            f"the arrays take {plan.loaded_bytes} bytes as sent, in their own dtypes; the "
            f"limit is {limit} (EPOCHAL_MAX_UPLOAD_ARRAY_BYTES)",
        )
    if plan.stored_bytes > limit:
        raise uploads.UploadError(
            413,
            f"the arrays take {plan.stored_bytes} bytes once stored (x as float32 unless "
            f"uint8, token ids as int32); the limit is {limit} (EPOCHAL_MAX_UPLOAD_ARRAY_BYTES)",
        )
    why = datasets.over_quota(session, key.id, plan.stored_bytes, "this upload needs")
    session.rollback()  # end the read: no transaction stays open while the file is parsed
    if why is not None:
        raise uploads.UploadError(507, why)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetPublic,
    operation_id="create_dataset",
    responses={
        429: documented("the key has EPOCHAL_MAX_UPLOADS_PER_KEY uploads in progress already"),
        507: documented("over the key's EPOCHAL_MAX_STORAGE_BYTES_PER_KEY"),
    },
)
def create_dataset(
    session: SessionDep,
    key: CurrentKey,
    file: Annotated[UploadFile, File(description=".npz with x, y[, x_test, y_test]; or .csv")],
    name: Annotated[str | None, Form(max_length=128, pattern=NAME_PATTERN)] = None,
    task: Annotated[Literal["classification", "regression"], Form()] = "classification",
    label_column: Annotated[str | None, Form(max_length=256, description="CSV only")] = None,
    kind: Annotated[
        DataKind,
        Form(description="values (default); tokens: x holds integer token ids (samples, steps)"),
    ] = "values",
) -> DatasetPublic:
    """Upload a data set; it is validated, then stored as .npz under the data dir."""
    checksum, size = uploads.sha256_and_size(file.file)
    try:
        fmt, raw = _read(session, key, file, size, (task, label_column, kind))
        arrays, summary = uploads.validate(raw, task, kind)
    except uploads.UploadError as exc:
        raise HTTPException(exc.status, exc.detail) from exc
    row = Dataset(
        id=new_id(),
        name=name or _default_name(file.filename),
        owner_id=key.id,
        format=fmt,
        task=task,
        size_bytes=0,
        checksum=checksum,
        **vars(summary),
    )
    settings = get_settings()
    path = uploads.store(arrays, settings.resolved_data_dir, row.id)
    row.size_bytes = path.stat().st_size  # what it costs is what is stored, not what was sent
    # A store of its own: workers on other machines, sharing no folder, fetch the file from it.
    shared = not is_artifacts_dir(settings)
    try:
        _within_quota_at_commit(session, key, row.size_bytes)
        if shared:
            get_store().put_file(upload_key(row.id), path)
        session.add(row)
        session.commit()
    except BaseException:
        session.rollback()
        path.unlink(missing_ok=True)  # no row, no file
        if shared:
            get_store().delete(upload_key(row.id))
        raise
    return DatasetPublic.model_validate(row)


def _within_quota_at_commit(session: SessionDep, key: CurrentKey, size: int) -> None:
    """The quota again, in the transaction that adds the row, the key's row locked: two
    uploads checked side by side before either was stored cannot both fit in one's room."""
    why = datasets.over_quota(session, key.id, size, "this upload takes")
    if why is not None:
        raise HTTPException(507, why)


@router.get("", response_model=DatasetsPublic, operation_id="list_datasets")
def read_datasets(
    session: SessionDep, key: CurrentKey, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> DatasetsPublic:
    """Your uploaded data sets, newest first (an admin key sees all)."""
    rows = datasets.list_visible(session, key, limit)
    return DatasetsPublic(items=[DatasetPublic.model_validate(r) for r in rows])


def _visible_or_404(
    session: SessionDep, key: CurrentKey, dataset_id: str, lock: bool = False
) -> Dataset:
    row = datasets.get_visible(session, dataset_id, key, lock=lock)
    if row is None:  # another owner's data set is a 404 too: its existence is not shown
        raise HTTPException(404, f"no data set {dataset_id}")
    return row


@router.get("/{dataset_id}", response_model=DatasetPublic, operation_id="get_dataset")
def read_dataset(session: SessionDep, key: CurrentKey, dataset_id: DatasetId) -> DatasetPublic:
    """One uploaded data set."""
    return DatasetPublic.model_validate(_visible_or_404(session, key, dataset_id))


@router.delete(
    "/{dataset_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="delete_dataset",
    responses={409: documented("a queued or running job uses it")},
)
def delete_dataset(session: SessionDep, key: CurrentKey, dataset_id: DatasetId) -> Response:
    """Delete an upload; 409 while a queued or running job uses it (finished jobs keep their
    results and models, but cannot be re-run from the same spec)."""
    row = _visible_or_404(session, key, dataset_id, lock=True)
    if users := datasets.unfinished_jobs_using(session, dataset_id):
        raise HTTPException(
            409, f"data set {dataset_id} is used by unfinished jobs: {', '.join(users)}"
        )
    session.delete(row)
    session.commit()
    upload_path(get_settings().resolved_data_dir, dataset_id).unlink(missing_ok=True)
    # Shards (an ingest still running fails on its own missing row), or the copy of an upload.
    if row.storage == "shards" or not is_artifacts_dir(get_settings()):
        get_store().delete_prefix(f"datasets/{dataset_id}/")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
