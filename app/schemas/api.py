"""Request and response shapes of the HTTP API (v1)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.schemas.job_spec import Framework
from app.schemas.metric_row import METRIC_FIELDS
from app.schemas.queue import QueueStanding


class TransitionPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    from_status: str | None = Field(description="a JobStatus (null for the first)")
    to_status: str = Field(description="a JobStatus")
    reason: str
    attempt: int
    at: datetime


class LayerSummary(BaseModel):
    """One node of the built model: the user's layers in order, then the head the service adds
    (`head_flatten` when the graph ends in more than one axis, `head`)."""

    name: str
    op: str
    output_shape: list[int] = Field(description="one sample's output, channels last")
    parameters: int = Field(description="trainable parameters of this node")
    frozen_parameters: int = Field(0, description='parameters of a node with "trainable": false')


class ModelSummary(BaseModel):
    """The job's model as built for its data's sample shape, head included."""

    parameters: int = Field(
        description="trainable parameters (batch-norm moving statistics are not parameters)"
    )
    frozen_parameters: int = Field(
        0, description='parameters of nodes with "trainable": false, which do not train'
    )
    flops_per_sample: int = Field(description="one sample's forward pass; a multiply-add is 2")
    layers: list[LayerSummary]


class StepProgress(BaseModel):
    """How far the epoch in progress is: what the training process last reported (every
    second or so), so a client's bar and ETA move within an epoch, the first one too."""

    epoch: int = Field(ge=1, description="the epoch in progress, from 1 (current_epoch + 1)")
    step: int = Field(ge=0, description="its optimizer steps done so far")
    steps: int = Field(ge=1, description="its optimizer steps in all")


STEP_PROGRESS = "the epoch in progress, by steps; null unless an attempt is training"
BEST_NAME = (
    "the metrics-row field best_epoch and best_metric are chosen by: early_stopping.monitor, "
    "else val_loss (train_loss without a validation split)"
)
MODEL_SUMMARY = "the built model (head included); null for a job stored before summaries"


class JobPublic(BaseModel):
    """A job as the API shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    framework: Framework
    status: str = Field(description="a JobStatus: where the job is in its life")
    stop_reason: str | None = Field(None, description="a StopReason: why training stopped")
    attempt: int
    epochs: int = Field(description="epochs the spec asks for")
    current_epoch: int
    best_epoch: int | None
    best_metric: float | None
    best_metric_name: str = Field(description=BEST_NAME)
    error_code: str | None
    error: str | None
    result: dict[str, Any] | None
    wait_reason: str | None = Field(None, description="why a queued job has not started")
    queue: QueueStanding | None = Field(
        None, description="a queued job's position, reason and estimated start"
    )
    priority: int = Field(50, description="a free worker runs the highest-priority job first")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    spec: dict[str, Any]
    tags: dict[str, str]
    sweep_id: str | None = Field(None, description="the sweep this job is a trial of")
    model_summary: ModelSummary | None = Field(None, description=MODEL_SUMMARY)
    step_progress: StepProgress | None = Field(None, description=STEP_PROGRESS)
    transitions: list[TransitionPublic]


class JobSummary(BaseModel):
    """A job in a list (no spec or transitions)."""

    id: str
    name: str
    framework: Framework
    status: str = Field(description="a JobStatus")
    stop_reason: str | None = Field(description="a StopReason")
    attempt: int
    epochs: int
    current_epoch: int
    best_epoch: int | None
    best_metric: float | None
    best_metric_name: str = Field(description=BEST_NAME)
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    tags: dict[str, str]
    sweep_id: str | None = None
    model_summary: ModelSummary | None = Field(None, description=MODEL_SUMMARY)


class JobsPublic(BaseModel):
    items: list[JobSummary]
    next_cursor: str | None = Field(None, description="pass as ?cursor= for the next page")


# One epoch: its number, then a nullable float per app.schemas.metric_row.METRIC_FIELDS name.
_METRIC_COLUMNS: dict[str, Any] = dict.fromkeys(METRIC_FIELDS, (float | None, ...))
MetricRow = create_model(
    "MetricRow",
    __doc__="One epoch; values that were not finite are null.",
    __config__=ConfigDict(from_attributes=True),
    epoch=(int, ...),
    **_METRIC_COLUMNS,
)


class MetricsPublic(BaseModel):
    job_id: str
    items: list[MetricRow]


class FieldError(BaseModel):
    """One offending field of a 422."""

    loc: list[str] = Field(description="where: body, query, path or header, then the path")
    field: str = Field(description="the dotted field (`training.epochs`), or `body`")
    msg: str = Field(description="what is wrong with it")
    type: str = Field(description="the error's kind, e.g. greater_than_equal or json_invalid")


class Problem(BaseModel):
    """An error (application/problem+json, RFC 9457)."""

    type: str = "about:blank"
    title: str = Field(description="the status's phrase, e.g. Not Found")
    status: int
    detail: str = Field(description="what went wrong, for people")
    errors: list[FieldError] | None = Field(None, description="422 only: each field")
