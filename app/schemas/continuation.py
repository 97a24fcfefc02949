"""The body of POST /v1/jobs/{id}/continue: epochs more from a succeeded job's last checkpoint,
and what may change on the way.

The checkpoint holds the weights, the optimizer's state, the schedule's place and early
stopping's wait, all made under the source job's spec: what defines them (framework, task,
model, training, optimizer, regularization, schedule, resources, …) stays the source's, and a
body naming one is a 422 naming the field. What may change is what the checkpoint does not fix:
the name, tags, priority and run-time limit, early stopping's patience (the wait goes on against
the new one), and the data set when the model built for it has the same variable shapes and
classes (checked at submit: app.domain.warm_start.check_continues).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.schemas.dataset_spec import DatasetSpec
from app.schemas.job_spec import JobSpec
from app.schemas.strict import StrictModel


class PatienceOverride(StrictModel):
    """Early stopping's patience for the new job; its monitor, mode and best so far stay."""

    patience: int = Field(ge=0, le=1000, description="epochs without improvement before stopping")


class ContinueRequest(StrictModel):
    """A new job that trains `epochs` more from the job's last checkpoint (weights, optimizer
    state, schedule and early stopping), numbered on from it; the other fields, when given,
    replace the source's (each checked as in a job spec)."""

    epochs: int = Field(
        ge=1, le=1000, description="epochs more; the new job's rows go on from the last"
    )
    name: str | None = Field(None, description="the new job's name (default: the source's)")
    tags: dict[str, str] | None = Field(None, description="the new job's tags, all of them")
    priority: int | None = Field(None, description="the new job's priority, within the key's cap")
    max_runtime_seconds: int | None = Field(None, description="the new job's run-time limit")
    early_stopping: PatienceOverride | None = Field(
        None, description="a new patience; only for a source that has early stopping"
    )
    dataset: DatasetSpec | None = Field(
        None,
        description="other data, when the model built for it has the same variable shapes and "
        "classes (the continuation is then no longer the same as one longer job)",
    )

    @model_validator(mode="before")
    @classmethod
    def _fixed_by_the_checkpoint(cls, data: Any) -> Any:
        """A job spec's field that the checkpoint fixes is a 422 naming it and saying why
        (not only 'extra inputs are not permitted')."""
        if not isinstance(data, dict):
            return data
        fixed = [k for k in data if k in JobSpec.model_fields and k not in cls.model_fields]
        details = [
            InitErrorDetails(
                type=PydanticCustomError(
                    "fixed_on_continue",
                    "{field} stays the source job's when it continues: its checkpoint was made "
                    "with it; start a new job with init to change it",
                    {"field": field},
                ),
                loc=(field,),
                input=data[field],
            )
            for field in fixed
        ]
        if details:
            raise ValidationError.from_exception_data(cls.__name__, details)
        return data

    def changes(self) -> dict[str, Any]:
        """The job-spec fields given that replace the source's whole (epochs and early
        stopping's patience are merged into theirs)."""
        return self.model_dump(mode="json", exclude_none=True, exclude={"epochs", "early_stopping"})
