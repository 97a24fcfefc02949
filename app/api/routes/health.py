"""Liveness and readiness (no authentication)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.deps import SessionDep
from app.services.queue import broker_reachable

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
def readyz(session: SessionDep) -> dict[str, str] | JSONResponse:
    """The database and the broker are reachable."""
    checks = {"database": "ok", "broker": "ok"}
    try:
        session.execute(text("SELECT 1"))
    except Exception:
        checks["database"] = "unreachable"
    if not broker_reachable():
        checks["broker"] = "unreachable"
    if any(v != "ok" for v in checks.values()):
        return JSONResponse(status_code=503, content={"status": "unavailable", **checks})
    return {"status": "ok", **checks}
