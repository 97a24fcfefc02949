"""Liveness and readiness (no authentication; readiness is bounded by app.api.probes)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.probes import bounded
from app.core.db import session_factory
from app.schemas.resources import Readiness
from app.services.queue import broker_reachable

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


def _checks() -> dict[str, str]:
    checks = {"database": "ok", "broker": "ok"}
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
    if any(v != "ok" for v in checks.values()):
        return JSONResponse(status_code=503, content={"status": "unavailable", **checks})
    return {"status": "ok", **checks}
