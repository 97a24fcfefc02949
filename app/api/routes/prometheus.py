"""Prometheus metrics (no authentication, like /healthz: nothing here names a user or a job)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from app.observability.db_collector import DatabaseCollector
from app.observability.telemetry import LOCAL

router = APIRouter(tags=["health"])
DATABASE = CollectorRegistry(auto_describe=False)
DATABASE.register(DatabaseCollector())


def _process_registry() -> CollectorRegistry:
    """This process's series, or every API process's when they share a multiprocess folder."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return registry
    return LOCAL


@router.get("/metrics", response_class=Response)
def read_metrics() -> Response:
    """Prometheus text format: jobs, queue, epochs, workers (from the DB) and request latency."""
    body = generate_latest(_process_registry()) + generate_latest(DATABASE)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
