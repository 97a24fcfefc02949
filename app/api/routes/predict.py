"""POST /v1/jobs/{id}/predict: raw rows in, classes and probabilities (or values) out, from the
job's exported model.onnx with ONNX Runtime; owner-only like every job route."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse

from app.api.bounded import WorkBound
from app.api.deps import JobDep, SessionDep, release_db
from app.api.errors import PROBLEM, problem
from app.core.config import get_settings
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus
from app.schemas.api import Problem
from app.schemas.predictions import PredictionsPublic, PredictRequest
from app.services.prediction_cost import OverBudget, RowCost, check_budget, fits_inline, row_cost
from app.services.prediction_inputs import InputError, RowSpec, parse_rows
from app.services.predictions import LoadedModel, NoModel, SessionCache, fetch_model_files

router = APIRouter(prefix="/jobs", tags=["predictions"])
# A loaded model answers on the event loop up to this body size and this cost (~a ms); the
# rest runs in the thread pool, at most EPOCHAL_PREDICT_CONCURRENCY at once per process: a
# CNN inside the parameter limit can cost GFLOPs a row (RELIABILITY.md §10d).
INLINE_BYTES = 8192
INLINE_FLOPS = 5 * 10**6
PREDICTIONS = WorkBound("predictions", lambda: get_settings().predict_concurrency, 1.0)

_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            # JSON only: a second body type (the .npy one, prediction_inputs.NPY_TYPES) makes
            # generated clients fail to import (openapi-python-client 0.29); the description
            # says how to send it.
            "application/json": {"schema": PredictRequest.model_json_schema()},
        },
        "description": 'JSON `{"inputs": [...]}`; or the bytes of an array saved with '
        "numpy.save (never pickled) with Content-Type application/x-npy or "
        "application/octet-stream",
    }
}


def _documented(when: str) -> dict[str, Any]:
    return {"model": Problem, "description": when, "content": {PROBLEM: {}}}


def sessions(request: Request) -> SessionCache:
    """This app's session cache (one per process), made on first use from the settings."""
    cache = getattr(request.app.state, "predictions", None)
    if cache is None:
        settings = get_settings()
        cache = SessionCache(settings.predict_cache_sessions, settings.predict_threads)
        request.app.state.predictions = cache
    return cache


@router.post(
    "/{job_id}/predict",
    response_model=PredictionsPublic,
    response_model_exclude_none=True,
    operation_id="predict",
    responses={
        409: _documented(
            "the job has not succeeded, has no model.onnx, or one row costs more "
            "than EPOCHAL_MAX_PREDICT_FLOPS or holds more than EPOCHAL_MAX_PREDICT_BYTES"
        ),
        422: _documented(
            "inputs of the wrong shape or type, not finite, or more rows than "
            "the FLOP or memory budget allows; says the shape or how many rows fit"
        ),
        503: _documented("this process runs EPOCHAL_PREDICT_CONCURRENCY predictions already"),
    },
    openapi_extra=_BODY,
)
async def predict(request: Request, session: SessionDep, job: JobDep) -> JSONResponse:
    """Predict up to EPOCHAL_MAX_PREDICT_ROWS raw rows: JSON `{"inputs": ...}` or an .npy body,
    within EPOCHAL_MAX_PREDICT_FLOPS and EPOCHAL_MAX_PREDICT_BYTES a request."""
    job_id, status, costing = job.id, job.status, Costing(job.model_summary, job.spec)
    await release_db(session)  # inference needs no database: give the slot back now
    if status != JobStatus.succeeded:
        raise HTTPException(409, f"job {job_id} is {status}: only a succeeded job predicts")
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    cache, job_dir = sessions(request), _job_dir(job_id)
    loaded = cache.cached(job_id, job_dir) if len(body) <= INLINE_BYTES else None
    if loaded is not None:  # a few cheap rows on a loaded model: less work than a thread hop
        batch = _batch(loaded, body, content_type)
        if isinstance(batch, JSONResponse):
            return batch
        if fits_inline(len(batch), costing.per_row(loaded), INLINE_FLOPS):
            return JSONResponse(loaded.predict(batch))
    work = partial(_load_and_answer, cache, job_id, body, content_type, costing)
    return await PREDICTIONS.run(work)


@dataclass(frozen=True)
class Costing:
    """What pricing a request needs of the job's row (read before its DB slot is released)."""

    summary: dict[str, Any] | None
    spec: dict[str, Any]

    def per_row(self, model: LoadedModel) -> RowCost | None:
        outputs = len(model.classes) if model.classes else 1
        return row_cost(self.summary, self.spec, model.row_shape, outputs)


def _load_and_answer(
    cache: SessionCache, job_id: str, body: bytes, content_type: str, costing: Costing
) -> JSONResponse:
    try:
        fetch_model_files(job_id, _job_dir(job_id))  # from the store, once, when it is elsewhere
        model = cache.get(job_id, _job_dir(job_id))
    except NoModel as exc:
        raise HTTPException(409, f"job {job_id} cannot predict: {exc}") from None
    batch = _batch(model, body, content_type)
    if isinstance(batch, JSONResponse):
        return batch
    try:
        check_budget(len(batch), costing.per_row(model))
    except OverBudget as exc:
        if not exc.rows_that_fit:
            raise HTTPException(409, f"job {job_id} cannot predict: {exc}") from None
        return _invalid_inputs(str(exc))
    return JSONResponse(model.predict(batch))


def _batch(model: LoadedModel, body: bytes, content_type: str) -> np.ndarray | JSONResponse:
    """The request's rows for this model, or the 422 saying what is wrong with them."""
    spec = RowSpec(model.row_shape, get_settings().max_predict_rows, model.vocab)
    try:
        return parse_rows(body, content_type, spec)
    except InputError as exc:
        return _invalid_inputs(str(exc))


def _invalid_inputs(message: str) -> JSONResponse:
    field = {"loc": ["body", "inputs"], "field": "inputs", "type": "value_error"}
    return problem(422, message, [{**field, "msg": message}])


def _job_dir(job_id: str) -> Path:
    return JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root
