"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI

from app.api import errors, openapi
from app.api.body_limit import BodySizeLimit
from app.api.clean_url import CleanUrl
from app.api.deps import current_key
from app.api.polled import PolledFastPath
from app.api.routes import (
    artifacts,
    dataset_references,
    dataset_uploads,
    datasets,
    events,
    health,
    job_logs,
    jobs,
    predict,
    prometheus,
    queue,
    sweeps,
    ui,
    workers,
)
from app.api.upload_gate import UploadAuthGate
from app.core.async_db import close_pool
from app.core.config import get_settings
from app.observability.telemetry import RequestMetrics
from app.services.maintenance import MaintenanceThread


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    # Reaping expired leases and re-sending lost messages runs in every API and worker
    # process; each step is one conditional UPDATE, so running it in many places is harmless.
    thread = MaintenanceThread(get_settings(), name="api-maintenance")
    thread.start()
    try:
        yield
    finally:
        thread.stop()
        await close_pool()


def create_app() -> FastAPI:
    settings = get_settings()
    app = FastAPI(
        title=openapi.TITLE,
        version="1",
        description="Submit typed training jobs; a GPU worker trains them; poll per-epoch metrics.",
        lifespan=lifespan,
        # The service's telemetry is its own (Prometheus series, the access log): FastAPI's
        # native OpenTelemetry would look up three global providers on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    errors.install(app)
    app.add_middleware(PolledFastPath)  # innermost: behind the URL, size and logging layers
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.max_body_bytes,
        upload_bytes=settings.max_upload_bytes + 64 * 1024,  # the file plus multipart framing
    )
    app.add_middleware(UploadAuthGate)  # outside the size limit: no key, no byte read
    app.add_middleware(CleanUrl)  # inside RequestMetrics, so refused requests are logged
    app.add_middleware(RequestMetrics)
    # Every /v1 route needs a key, so a new route cannot forget it (P43).
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(current_key)], responses=errors.V1_RESPONSES)
    v1.include_router(jobs.router)
    v1.include_router(artifacts.router)
    v1.include_router(predict.router)
    v1.include_router(dataset_uploads.router)
    v1.include_router(dataset_references.router)
    v1.include_router(datasets.router)
    v1.include_router(workers.router)
    v1.include_router(job_logs.router)
    v1.include_router(events.router)
    v1.include_router(sweeps.router)
    v1.include_router(queue.router)
    app.include_router(v1)
    app.include_router(health.router)
    app.include_router(prometheus.router)
    ui.install(app)
    openapi.install(app)
    return app


app = create_app()
