"""What a prediction costs before it runs: FLOPs per row of a job's model, and the request's
rows against EPOCHAL_MAX_PREDICT_FLOPS (RELIABILITY.md §10d).

FLOPs per row come from the job's model summary (built from its spec at submit, the model
the worker exported); a job stored before summaries existed gets its spec's graph built for
the row shape of its model card. One function, so another estimate can replace it.
"""

from __future__ import annotations

from typing import Any

from app.core.config import get_settings
from app.domain.cost import DataShape, graph_of
from app.schemas.graph import GraphError
from app.schemas.job_spec import JobSpec


class OverBudget(ValueError):
    """The request costs more than the budget; `rows_that_fit` may be 0."""

    def __init__(self, message: str, rows_that_fit: int) -> None:
        super().__init__(message)
        self.rows_that_fit = rows_that_fit


def flops_per_row(
    summary: dict[str, Any] | None,
    spec: dict[str, Any],
    row_shape: tuple[int, ...],
    outputs: int,
) -> int | None:
    """FLOPs one row costs the model (None: the spec's model cannot be built for the rows)."""
    if summary and isinstance(summary.get("flops_per_sample"), int):
        return int(summary["flops_per_sample"])
    try:
        data = DataShape(1, 0, row_shape, 4, outputs)
        return graph_of(JobSpec.model_validate(spec), data).flops_per_sample
    except (GraphError, ValueError):
        return None


def check_budget(rows: int, per_row: int | None) -> None:
    """OverBudget when `rows` rows of `per_row` FLOPs pass EPOCHAL_MAX_PREDICT_FLOPS."""
    budget = get_settings().max_predict_flops
    if per_row is None:
        raise OverBudget("the cost of this job's model cannot be estimated", 0)
    if rows * per_row <= budget:
        return
    fit = budget // max(per_row, 1)
    raise OverBudget(
        f"{rows} rows of {per_row:,} FLOPs each cost {rows * per_row:,} FLOPs; a request may "
        f"cost {budget:,} (EPOCHAL_MAX_PREDICT_FLOPS): send at most {fit} rows at once"
        if fit
        else f"one row costs this model {per_row:,} FLOPs, more than a request may cost "
        f"({budget:,}, EPOCHAL_MAX_PREDICT_FLOPS)",
        fit,
    )


def fits_inline(rows: int, per_row: int | None, inline_flops: int) -> bool:
    """Whether the rows are cheap enough to run on the event loop (less than a thread hop),
    and within the budget."""
    limit = min(inline_flops, get_settings().max_predict_flops)
    return per_row is not None and rows * per_row <= limit
