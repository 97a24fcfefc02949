"""POST /v1/jobs/{id}/predict: raw rows in, classes and probabilities (or values) out, from the
job's exported model.onnx with ONNX Runtime; owner-only like every job route."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.api.deps import JobDep, SessionDep, release_db
from app.api.errors import PROBLEM, problem
from app.core.config import get_settings
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus
from app.schemas.api import Problem
from app.schemas.predictions import PredictionsPublic, PredictRequest
from app.services.prediction_inputs import InputError, RowSpec, parse_rows
from app.services.predictions import LoadedModel, NoModel, SessionCache

router = APIRouter(prefix="/jobs", tags=["predictions"])
INLINE_BYTES = 8192  # up to this body size a loaded model answers on the event loop

_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            # JSON only: a second body type (the .npy one, prediction_inputs.NPY_TYPES) makes
            # generated clients fail to import (openapi-python-client 0.29); the description
            # says how to send it.
            "application/json": {"schema": PredictRequest.model_json_schema()},
        },
        "description": "JSON `{\"inputs\": [...]}`; or the bytes of an array saved with "
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
        409: _documented("the job has not succeeded, or has no exported model.onnx"),
        422: _documented("inputs of the wrong shape or type, or not finite; says the shape"),
    },
    openapi_extra=_BODY,
)
async def predict(request: Request, session: SessionDep, job: JobDep) -> JSONResponse:
    """Predict up to EPOCHAL_MAX_PREDICT_ROWS raw rows: JSON `{"inputs": ...}` or an .npy body."""
    job_id, status = job.id, job.status
    await release_db(session)  # inference needs no database: give the slot back now
    if status != JobStatus.succeeded:
        raise HTTPException(409, f"job {job_id} is {status}: only a succeeded job predicts")
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    cache, job_dir = sessions(request), _job_dir(job_id)
    loaded = cache.cached(job_id, job_dir) if len(body) <= INLINE_BYTES else None
    if loaded is not None:  # a few rows on a loaded model: less work than a hop to a thread
        return _answer(loaded, body, content_type)
    return await run_in_threadpool(_load_and_answer, cache, job_id, body, content_type)


def _load_and_answer(
    cache: SessionCache, job_id: str, body: bytes, content_type: str
) -> JSONResponse:
    try:
        model = cache.get(job_id, _job_dir(job_id))
    except NoModel as exc:
        raise HTTPException(409, f"job {job_id} cannot predict: {exc}") from None
    return _answer(model, body, content_type)


def _answer(model: LoadedModel, body: bytes, content_type: str) -> JSONResponse:
    spec = RowSpec(model.row_shape, get_settings().max_predict_rows)
    try:
        batch = parse_rows(body, content_type, spec)
    except InputError as exc:
        field = {"loc": ["body", "inputs"], "field": "inputs", "type": "value_error"}
        return problem(422, str(exc), [{**field, "msg": str(exc)}])
    return JSONResponse(model.predict(batch))


def _job_dir(job_id: str) -> Path:
    return JobFiles.of(get_settings().resolved_artifacts_dir, job_id).root
