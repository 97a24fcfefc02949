"""Liveness and readiness (no authentication; readiness is bounded by app.api.probes)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.probes import bounded
from app.core.db import session_factory
from app.schemas.resources import Readiness
from app.services.queue import broker_reachable
from app.storage.health import store_watch

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
async def healthz() -> dict[str, str]:
    """The process is up; `store`: the store's state at its last probe (never waited for)."""
    return {"status": "ok", "store": store_watch().last().status}


def _checks() -> dict[str, str]:
    store: str = store_watch().refresh().status
    checks = {"database": "ok", "broker": "ok", "store": store}
    try:
        with session_factory()() as session:
            session.execute(text("SELECT 1"))
    except Exception:
        checks["database"] = "unreachable"
    if not broker_reachable():
        checks["broker"] = "unreachable"
    return checks


@router.get(
    "/readyz",
    response_model=None,
    operation_id="readyz",
    responses={
        200: {"model": Readiness, "description": "the database and the broker answer"},
        503: {"model": Readiness, "description": "one of them does not (or too many probes)"},
    },
)
async def readyz() -> dict[str, str] | JSONResponse:
    """The database and the broker are reachable."""
    checks = await bounded(_checks)
    # The store is shown, not required: job reads, submissions and training go on without it,
    # and what needs it (downloads, predictions) answers 503 with Retry-After by itself.
    if checks["database"] != "ok" or checks["broker"] != "ok":
        return JSONResponse(status_code=503, content={"status": "unavailable", **checks})
    return {"status": "ok", **checks}
