"""Response shapes of the data set, artifact and worker routes (v1)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

# What an upload's x holds: real values (features, images, float sequences) or token ids.
DataKind = Literal["values", "tokens"]
DatasetStatus = Literal["ingesting", "ready", "failed"]


class DatasetPublic(BaseModel):
    """A data set: stored from one upload request (ready at once), or ingested into shards from
    a resumable upload or a reference (ingesting, then ready or failed)."""

    model_config = ConfigDict(from_attributes=True)

    id: str = Field(description="name it in a job spec as dataset.id")
    name: str
    status: DatasetStatus = Field(
        description="ingesting (see progress), ready (jobs may use it) or failed (see error)"
    )
    error: str | None = Field(None, description="failed: why, naming the file and the record")
    progress: float | None = Field(None, description="ingesting: the fraction done, 0 … 1")
    version: str | None = Field(
        None, description="ingested data sets: the content hash; a spec may pin dataset.version"
    )
    storage: Literal["npz", "shards"] = Field(
        "npz", description="npz: stored whole from one request; shards: ingested, streamed"
    )
    format: str = Field(description="the source's format: npz, csv, npy, …")
    task: Literal["classification", "regression"]
    shape: list[int] = Field(description="shape of one sample, e.g. [28, 28] or [32]")
    dtype: str = Field(description="dtype of x as stored: uint8 or float32; int32 for tokens")
    kind: DataKind = Field(description="values, or tokens: x holds token ids (samples, steps)")
    vocab: int | None = Field(
        description="tokens only: max token id + 1, the least vocab_size of an embedding"
    )
    samples: int = Field(
        description="training samples (a job's validation split comes out of these)"
    )
    test_samples: int | None = Field(description="samples of x_test, if given")
    classes: int | None = Field(description="max label + 1 (classification only)")
    size_bytes: int = Field(description="size of the stored arrays (what the quota counts)")
    checksum: str = Field(description="sha256 of the uploaded file")
    created_at: datetime

    @computed_field(description="every record: samples and test samples")  # type: ignore[prop-decorator]
    @property
    def rows(self) -> int:
        return self.samples + (self.test_samples or 0)

    @computed_field(description="what it stores, as size_bytes")  # type: ignore[prop-decorator]
    @property
    def bytes(self) -> int:
        return self.size_bytes


def _known_format(name: str | None) -> str | None:
    """A named format must be one the ingest reads (app.shards.ingest), said at the request,
    not after the upload."""
    from app.shards.ingest import FORMATS  # the registry: each format one module

    if name is not None and name not in FORMATS:
        raise ValueError(f"format {name!r} is not one of {', '.join(FORMATS)}")
    return name


class UploadCreate(BaseModel):
    """A resumable upload, announced before its first byte."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=128, pattern=r"^[\w.\- ]+$")
    filename: str = Field(
        min_length=1, max_length=255, description="its suffix names the format: .npz, .npy, .csv"
    )
    size: int = Field(ge=1, description="the file's size in bytes")
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$", description="of the whole file")
    task: Literal["classification", "regression"] = "classification"
    format: str | None = Field(
        None, max_length=32, pattern=r"^[a-z0-9_-]+$", description="when the suffix does not say"
    )
    label_column: str | None = Field(None, max_length=256, description="CSV: the label column")

    _format = field_validator("format")(_known_format)


class UploadPublic(BaseModel):
    """A resumable upload in progress: send the part that starts at `offset`."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    filename: str
    size: int = Field(validation_alias="total_bytes", description="bytes announced")
    offset: int = Field(validation_alias="received_bytes", description="bytes the server holds")
    min_part_bytes: int = Field(description="every part but the last holds at least this many")
    max_part_bytes: int = Field(description="no part holds more")
    created_at: datetime
    updated_at: datetime


class ReferenceCreate(BaseModel):
    """A data set registered by reference: files the server may read, ingested like an upload."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(
        min_length=1,
        max_length=4096,
        description="a path under an allowed root (EPOCHAL_DATA_ROOTS), or s3://bucket/prefix "
        "inside the service's own store",
    )
    name: str | None = Field(None, max_length=128, pattern=r"^[\w.\- ]+$")
    task: Literal["classification", "regression"] = "classification"
    format: str | None = Field(None, max_length=32, pattern=r"^[a-z0-9_-]+$")
    label_column: str | None = Field(None, max_length=256, description="CSV: the label column")

    _format = field_validator("format")(_known_format)


class DatasetsPublic(BaseModel):
    items: list[DatasetPublic]


class ArtifactPublic(BaseModel):
    """One thing a job produced."""

    kind: Literal["model", "onnx", "model_card", "checkpoint", "spec", "log"]
    name: str = Field(description="file name, or the checkpoint directory's name")
    size_bytes: int
    epoch: int | None = Field(None, description="the epoch a checkpoint was taken after")
    url: str | None = Field(None, description="where to download it, if it can be downloaded")


class ArtifactsPublic(BaseModel):
    """What exists for a job now, and what loading its model needs."""

    job_id: str
    items: list[ArtifactPublic]
    input_shape: list[int] | None = Field(
        None, description="shape of one input sample, for rebuilding the PyTorch module"
    )
    outputs: int | None = Field(None, description="classes, or 1 for regression")


class Readiness(BaseModel):
    """GET /readyz: the process can serve (database and broker ok), or which dependency it
    cannot reach; the store's state is shown and does not make the process unready."""

    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"] | None = None
    broker: Literal["ok", "unreachable"] | None = None
    store: Literal["ok", "unavailable", "error", "unknown"] | None = Field(
        None, description="unavailable: down or throttling; error: refused (bucket, credentials)"
    )


class DevicePublic(BaseModel):
    id: str = Field(description="the id the worker was given (EPOCHAL_WORKER_GPUS)")
    name: str | None = Field(None, description="from nvidia-smi, when it is installed")
    memory_mb: int | None = None


class WorkerPublic(BaseModel):
    """A live worker, as its heartbeats describe it: in full for an admin key; for any other
    a summary (the host in its name replaced by a digest; no hostname, devices, memory, disk)."""

    name: str
    hostname: str | None = Field(None, description="admin keys only")
    gpus: int
    devices: list[DevicePublic] = Field(
        default_factory=list, description="admin keys only: each GPU's id, name and memory"
    )
    queues: list[str] = Field(description="a worker with G GPUs takes jobs needing 0 … G")
    busy: bool
    current_job_id: str | None = Field(
        None, description="the job it runs, shown when the caller may see that job"
    )
    started_at: datetime
    heartbeat_at: datetime
    memory_bytes: int | None = Field(
        None, description="host memory one job may use (admin keys only)"
    )
    disk_free_bytes: int | None = Field(
        None, description="free disk of its artifacts dir (admin keys only)"
    )


class WorkersPublic(BaseModel):
    items: list[WorkerPublic]
