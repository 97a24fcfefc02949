"""A job's spec as the database stores it (JobSpec.model_dump(mode="json"), its defaults
filled in), read back typed without validating it whole.

JobSpec.model_validate of a stored spec checks every field and builds the model's graph: the
place for it is where a job is started, continued or warm-started from. The reads polled most
(a job, a page of jobs, the scheduler's estimates, the queue's expiry) need a few fields: they
read them through `stored`, whose TypedDict names those fields, so mypy checks each key read;
tests/app/schemas/test_stored_spec.py checks each key and type here against JobSpec, so a renamed
field fails there. A sweep's refused trial stores its spec as drawn, which may not validate,
but over the base's (app.services.trial_rows): the fields read here are there too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, cast

from typing_extensions import TypedDict  # typing's: pydantic cannot check it (tests) on 3.11

from app.schemas.metric_row import best_field


class StoredTraining(TypedDict):
    epochs: int


class StoredDataset(TypedDict):
    validation_split: float


class StoredEarlyStopping(TypedDict):
    monitor: str


class StoredSpec(TypedDict):
    """The fields of a stored JobSpec that are read without validating it."""

    framework: str
    training: StoredTraining
    dataset: StoredDataset
    early_stopping: NotRequired[StoredEarlyStopping | None]
    tags: NotRequired[dict[str, str]]
    max_queue_seconds: NotRequired[int | None]


class Shown(TypedDict):
    """What a job's answer shows of its spec beside the spec itself."""

    epochs: int
    tags: dict[str, str]
    best_metric_name: str


def stored(spec: Mapping[str, Any]) -> StoredSpec:
    """A stored spec, typed: no copy, no check (JobSpec checked it before it was stored)."""
    return cast(StoredSpec, spec)


def shown(spec: Mapping[str, Any]) -> Shown:
    """A job's `epochs`, `tags` and `best_metric_name` from its stored spec."""
    typed = stored(spec)
    watched = typed.get("early_stopping")
    validates = typed["dataset"]["validation_split"] > 0
    return {
        "epochs": typed["training"]["epochs"],
        "tags": typed.get("tags") or {},
        "best_metric_name": best_field(watched["monitor"] if watched else None, validates),
    }
