"""Prometheus metrics: nothing here names a user or a job; EPOCHAL_METRICS_TOKEN, when set,
is required as `Authorization: Bearer <token>`; concurrent scrapes are bounded (app.api.probes)."""

from __future__ import annotations

import hmac
import os
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from app.api.errors import documented
from app.api.probes import bounded
from app.core.config import get_settings
from app.observability.db_collector import DatabaseCollector
from app.observability.store_collector import StoreCollector
from app.observability.telemetry import LOCAL

router = APIRouter(tags=["health"])
SHARED = CollectorRegistry(auto_describe=False)  # read at scrape time from what processes share
SHARED.register(DatabaseCollector())
SHARED.register(StoreCollector())
scraper = HTTPBearer(
    auto_error=False,
    scheme_name="MetricsToken",
    description="`Authorization: Bearer <EPOCHAL_METRICS_TOKEN>`, when the server sets one",
)


def _process_registry() -> CollectorRegistry:
    """This process's series, or every API process's when they share a multiprocess folder."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return registry
    return LOCAL


def check_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(scraper)],
) -> None:
    """401 unless the scraper shows EPOCHAL_METRICS_TOKEN (when one is set)."""
    token = get_settings().metrics_token
    if token is None:
        return
    given = credentials.credentials if credentials else ""
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(
            401,
            "this server's /metrics needs Authorization: Bearer <EPOCHAL_METRICS_TOKEN>",
            headers={"WWW-Authenticate": "Bearer"},
        )


def _scrape() -> bytes:
    return generate_latest(_process_registry()) + generate_latest(SHARED)


@router.get(
    "/metrics",
    response_class=Response,
    dependencies=[Depends(check_token)],
    operation_id="prometheus_metrics",
    responses={
        200: {
            "description": "Prometheus text format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        401: documented("EPOCHAL_METRICS_TOKEN is set and was not sent"),
        503: documented("more scrapes at once than allowed; retry"),
    },
)
async def read_metrics() -> Response:
    """Prometheus text format: jobs, queue, epochs, workers (from the DB), the store's state
    and request latency."""
    return Response(await bounded(_scrape), media_type=CONTENT_TYPE_LATEST)
