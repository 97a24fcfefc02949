"""Response shapes of the data set, artifact and worker routes (v1)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# What an upload's x holds: real values (features, images, float sequences) or token ids.
DataKind = Literal["values", "tokens"]


class DatasetPublic(BaseModel):
    """An uploaded data set, as validated and stored."""

    model_config = ConfigDict(from_attributes=True)

    id: str = Field(description="name it in a job spec as dataset.id")
    name: str
    format: Literal["npz", "csv"] = Field(description="the uploaded file's format")
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
    """GET /readyz: the process can serve (both ok), or which dependency it cannot reach."""

    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"] | None = None
    broker: Literal["ok", "unreachable"] | None = None


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
