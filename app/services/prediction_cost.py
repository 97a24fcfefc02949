"""What a prediction costs before it runs: FLOPs and memory per row of a job's model, and the
request's rows against EPOCHAL_MAX_PREDICT_FLOPS and EPOCHAL_MAX_PREDICT_BYTES (RELIABILITY.md
§10d).

Both come from the job's model summary (built from its spec at submit, the model the worker
exported); a job stored before summaries existed gets its spec's graph built for the row shape
of its model card. Memory is priced at every layer's output held at once, 4 bytes a value: what
ONNX Runtime may hold for a row when nothing is freed early. FLOPs alone let through a graph
that is cheap to compute and huge to hold (`concat` and `reshape` cost no FLOPs). One function,
so another estimate can replace it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.core.config import get_settings
from app.domain.cost import DataShape, graph_of
from app.schemas.graph import GraphError
from app.schemas.job_spec import JobSpec

VALUE_BYTES = 4  # float32 activations


class OverBudget(ValueError):
    """The request costs more than the budget; `rows_that_fit` may be 0."""

    def __init__(self, message: str, rows_that_fit: int) -> None:
        super().__init__(message)
        self.rows_that_fit = rows_that_fit


@dataclass(frozen=True)
class RowCost:
    flops: int
    bytes: int  # the row's input and every layer's output, held at once


def row_cost(
    summary: dict[str, Any] | None,
    spec: dict[str, Any],
    row_shape: tuple[int, ...],
    outputs: int,
) -> RowCost | None:
    """What one row costs the model (None: the spec's model cannot be built for the rows)."""
    if not (summary and isinstance(summary.get("flops_per_sample"), int) and _layers(summary)):
        try:
            data = DataShape(1, 0, row_shape, 4, outputs)
            summary = graph_of(JobSpec.model_validate(spec), data).summary()
        except (GraphError, ValueError):
            return None
    values = math.prod(row_shape) + sum(
        math.prod(layer["output_shape"]) for layer in _layers(summary)
    )
    return RowCost(int(summary["flops_per_sample"]), values * VALUE_BYTES)


def _layers(summary: dict[str, Any]) -> list[dict[str, Any]]:
    layers = summary.get("layers")
    return layers if isinstance(layers, list) else []


def check_budget(rows: int, cost: RowCost | None) -> None:
    """OverBudget when `rows` rows pass EPOCHAL_MAX_PREDICT_FLOPS or EPOCHAL_MAX_PREDICT_BYTES."""
    if cost is None:
        raise OverBudget("the cost of this job's model cannot be estimated", 0)
    settings = get_settings()
    _within(rows, cost.flops, settings.max_predict_flops, "FLOPs", "EPOCHAL_MAX_PREDICT_FLOPS")
    _within(rows, cost.bytes, settings.max_predict_bytes, "bytes", "EPOCHAL_MAX_PREDICT_BYTES")


def _within(rows: int, per_row: int, budget: int, unit: str, setting: str) -> None:
    if rows * per_row <= budget:
        return
    fit = budget // max(per_row, 1)
    cost = "cost" if unit == "FLOPs" else "hold"
    raise OverBudget(
        f"{rows} rows of {per_row:,} {unit} each {cost} {rows * per_row:,} {unit}; a request may "
        f"{cost} {budget:,} ({setting}): send at most {fit} rows at once"
        if fit
        else f"one row {cost}s this model {per_row:,} {unit}, more than a request may {cost} "
        f"({budget:,}, {setting})",
        fit,
    )


def fits_inline(rows: int, cost: RowCost | None, inline_flops: int) -> bool:
    """Whether the rows are cheap enough to run on the event loop (less than a thread hop),
    and within the budget."""
    if cost is None:
        return False
    settings = get_settings()
    limit = min(inline_flops, settings.max_predict_flops)
    return rows * cost.flops <= limit and rows * cost.bytes <= settings.max_predict_bytes
