"""The dashboard: static files under app/static, no build step, no third-party script.

The page itself needs no key; it asks for one, keeps it in sessionStorage and sends it as the
Authorization header of every API call (fetch, also for the event stream), so a key never sits
in a URL that a proxy or an access log would keep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app.schemas.job_spec import JobSpec

STATIC = Path(__file__).resolve().parents[2] / "static"
SECURITY_HEADERS = {
    # Only our own files run; nothing is loaded from elsewhere (there is no internet anyway).
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; "
        "script-src 'self'; connect-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
router = APIRouter(include_in_schema=False)


@router.get("/ui")
def read_ui() -> FileResponse:
    """The dashboard's single page."""
    return FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS)


@router.get("/ui/spec-defaults.json")
def read_spec_defaults() -> dict[str, Any]:
    """A complete spec with every default filled in, to start the submit form from."""
    spec = JobSpec(name="my-job", framework="pytorch", dataset={"name": "digits"})  # type: ignore[arg-type]
    return spec.model_dump(mode="json")


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
