"""A job's artifacts: list what exists, download the trained model, its ONNX twin and card.

Only fixed names of the job's own are ever read (the model file, `model.onnx`,
`model-card.json`, the latest checkpoint, `spec.json`, `job.log`); nothing in a request becomes
a path or a key (RELIABILITY.md P45). The model and its exports stream from the store
(app.storage), where the worker puts them before the job succeeds; so does the latest
checkpoint's listing when the store is not the artifacts directory (its sets, with manifests).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response, StreamingResponse

from app.api.deps import JobDep, SessionDep
from app.api.errors import documented
from app.api.ranged import download
from app.core.config import get_settings
from app.domain.job_files import CARD_FILE, MODEL_FILES, ONNX_FILE, JobFiles, job_key
from app.domain.states import JobStatus
from app.domain.tables import Dataset, Job
from app.schemas.augment import augmented_shape
from app.schemas.dataset_spec import input_shape_and_classes
from app.schemas.job_spec import JobSpec
from app.schemas.resources import ArtifactPublic, ArtifactsPublic
from app.storage import get_store
from app.storage.base import ObjectInfo, ObjectNotFound
from app.storage.checkpoint_sets import CheckpointSets
from app.storage.registry import is_artifacts_dir

router = APIRouter(prefix="/jobs", tags=["artifacts"])
# kind -> (file under model/, URL segment, media type): the portable exports of a succeeded job
EXPORTS = {
    "onnx": (ONNX_FILE, "onnx", "application/octet-stream"),
    "model_card": (CARD_FILE, "model-card", "application/json"),
}
# A download's 200: bytes (generated clients get them as they are, not parsed)
BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
PRESIGNED = {
    "description": "EPOCHAL_STORE_PRESIGN_SECONDS is set: `Location` is a URL of the store, "
    "signed for that long, that serves the same bytes (ranges too)",
    "headers": {"Location": {"schema": {"type": "string", "format": "uri"}}},
}
CHECKPOINT_NAME = re.compile(r"^epoch-(\d{1,9})$")


def _job_files(job: Job) -> JobFiles:
    """The job's files, under its resolved directory (what _inside checks against)."""
    return JobFiles(JobFiles.of(get_settings().resolved_artifacts_dir, job.id).root.resolve())


def _inside(root: Path, path: Path) -> Path | None:
    """The path if it is a plain file or directory that really lies under root (no symlink out)."""
    if not path.exists():
        return None
    resolved = path.resolve()
    return resolved if resolved.is_relative_to(root) else None


def stored_export(job: Job, kind: str) -> ObjectInfo | None:
    """model.onnx or model-card.json of a succeeded job, if the worker put it in the store."""
    if job.status != JobStatus.succeeded:
        return None
    try:
        return get_store().head(job_key(job.id, "model", EXPORTS[kind][0]))
    except ObjectNotFound:
        return None


def _checkpoint(job: Job, files: JobFiles) -> ArtifactPublic | None:
    """The job's latest checkpoint: the store's newest set with a manifest, or with the default
    store the directory `checkpoints/latest` names; its epoch and total size."""
    if not is_artifacts_dir(get_settings()):
        manifest = CheckpointSets(get_store(), job_key(job.id, "checkpoints")).latest()
        if manifest is None:
            return None
        size = sum(part.size for part in manifest.parts)
        return ArtifactPublic(
            kind="checkpoint", name=manifest.name, size_bytes=size, epoch=manifest.epoch
        )
    root = files.root
    latest = _inside(root, files.latest)
    if latest is None or not latest.is_file():
        return None
    name = latest.read_text().strip()
    match = CHECKPOINT_NAME.match(name)
    folder = _inside(root, files.checkpoints / name) if match else None
    if match is None or folder is None or not folder.is_dir():
        return None
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return ArtifactPublic(kind="checkpoint", name=name, size_bytes=size, epoch=int(match[1]))


def _model_io(session: SessionDep, job: Job) -> tuple[list[int] | None, int | None]:
    """Input shape and outputs of the trained model, from the spec or the upload's row."""
    spec = JobSpec.model_validate(job.spec)
    known = input_shape_and_classes(spec)
    if known is not None:
        return list(known[0]), known[1]
    row = session.get(Dataset, spec.dataset.id) if spec.dataset.id else None
    if row is None:  # the upload was deleted after the job finished
        return None, None
    shape = augmented_shape(spec.dataset.augment, tuple(row.shape))  # what the model reads
    return list(shape), (row.classes or 1) if spec.task == "classification" else 1


@router.get("/{job_id}/artifacts", response_model=ArtifactsPublic, operation_id="get_artifacts")
def read_artifacts(session: SessionDep, job: JobDep) -> ArtifactsPublic:
    """What the job has produced so far: model, last checkpoint, resolved spec, log."""
    files, items = _job_files(job), []
    model = stored_model(job) if job.status == JobStatus.succeeded else None
    if model is not None:  # listed as the download route finds it: in the store
        url = f"/v1/jobs/{job.id}/artifacts/model"
        name = PurePosixPath(model.key).name
        items.append(ArtifactPublic(kind="model", name=name, size_bytes=model.size, url=url))
    for kind, (name, segment, _) in EXPORTS.items():
        if (found := stored_export(job, kind)) is not None:
            url = f"/v1/jobs/{job.id}/artifacts/{segment}"
            item = {"kind": kind, "name": name, "size_bytes": found.size, "url": url}
            items.append(ArtifactPublic.model_validate(item))
    if (checkpoint := _checkpoint(job, files)) is not None:
        items.append(checkpoint)
    for kind, path in (("spec", files.spec), ("log", files.log)):
        local = _inside(files.root, path)
        if local is not None and local.is_file():
            items.append(ArtifactPublic(kind=kind, name=path.name, size_bytes=local.stat().st_size))
    shape, outputs = _model_io(session, job)
    return ArtifactsPublic(job_id=job.id, items=items, input_shape=shape, outputs=outputs)


@router.get(
    "/{job_id}/artifacts/model",
    response_class=StreamingResponse,
    operation_id="download_model",
    responses={
        200: {"content": BINARY, "description": "the model file"},
        206: {"content": BINARY, "description": "the byte range the Range header asked for"},
        307: PRESIGNED,
        404: documented("no such job, or no model yet"),
        416: documented("the Range header starts past the end of the model"),
        503: documented("the database or the store is unavailable; retry after `Retry-After`"),
    },
)
def download_model(job: JobDep, request: Request) -> Response:
    """The trained model: PyTorch state_dict (`model.pt`) or a Keras file (`model.keras`),
    streamed from the store; a `Range: bytes=a-b` header gets that part (206)."""
    # Only a succeeded job's model is whole: the file is written before the job is marked done.
    found = stored_model(job) if job.status == JobStatus.succeeded else None
    if found is None:
        raise HTTPException(404, f"job {job.id} has no model (status {job.status})")
    suffix = PurePosixPath(found.key).suffix
    try:
        return download(
            get_store(),
            found.key,
            found.size,
            request.headers,
            "application/octet-stream",
            _download_name(job, suffix),
            get_settings().store_presign_seconds,
        )
    except ObjectNotFound:  # deleted (the job too, or retention) since it was found
        raise HTTPException(404, f"job {job.id} has no model any more") from None


def stored_model(job: Job) -> ObjectInfo | None:
    """The job's model in the store (keys as in the artifacts directory: <job id>/model/...)."""
    store = get_store()
    for name in MODEL_FILES.values():
        try:
            return store.head(job_key(job.id, "model", name))
        except ObjectNotFound:
            continue
    return None


def _download_name(job: Job, suffix: str) -> str:
    safe_name = re.sub(r"[^\w.\-]", "-", job.name)
    return f"{safe_name}-{job.id[:8]}{suffix}"


def _serve_export(job: Job, kind: str, request: Request) -> Response:
    found = stored_export(job, kind)
    name, _, media_type = EXPORTS[kind]
    if found is None:
        raise HTTPException(404, f"job {job.id} has no {name} (status {job.status})")
    suffix = "-model-card.json" if kind == "model_card" else PurePosixPath(name).suffix
    try:
        return download(
            get_store(),
            found.key,
            found.size,
            request.headers,
            media_type,
            _download_name(job, suffix),
            get_settings().store_presign_seconds,
        )
    except ObjectNotFound:  # deleted (the job too, or retention) since it was found
        raise HTTPException(404, f"job {job.id} has no {name} any more") from None


@router.get(
    "/{job_id}/artifacts/onnx",
    response_class=StreamingResponse,
    operation_id="download_onnx",
    responses={
        200: {"content": BINARY, "description": "model.onnx"},
        206: {"content": BINARY, "description": "the byte range the Range header asked for"},
        307: PRESIGNED,
        404: documented("no such job, or no exported model"),
        416: documented("the Range header starts past the end of the file"),
        503: documented("the database or the store is unavailable; retry after `Retry-After`"),
    },
)
def download_onnx(job: JobDep, request: Request) -> Response:
    """The portable model (`model.onnx`): raw inputs in, the job's normalization inside."""
    return _serve_export(job, "onnx", request)


@router.get(
    "/{job_id}/artifacts/model-card",
    response_class=StreamingResponse,
    operation_id="download_model_card",
    responses={
        200: {
            "content": {"application/json": {"schema": {"type": "object"}}},
            "description": "model-card.json",
        },
        307: PRESIGNED,
        404: documented("no such job, or no exported model"),
        503: documented("the database or the store is unavailable; retry after `Retry-After`"),
    },
)
def download_model_card(job: JobDep, request: Request) -> Response:
    """`model-card.json`: input shape and dtype, normalization, classes, spec, data checksum."""
    return _serve_export(job, "model_card", request)
