"""What an API process measures about itself: request latency, SSE streams, and per-request logs.

Series about jobs and workers do not live here: they are read from the database at scrape time
(app.observability.db_collector), which stays true however many API and worker processes there
are. These are the process-local ones. With several uvicorn workers, `epochal api --workers N`
points PROMETHEUS_MULTIPROC_DIR at a fresh folder so a scrape sums every process
(prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import tempfile
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.log_setup import job_context
from app.schemas.ids import ID_PART

log = logging.getLogger("epochal.access")
LOCAL = CollectorRegistry(auto_describe=True)
REQUEST_SECONDS = Histogram(
    "epochal_http_request_duration_seconds",
    "Time from request to response headers, by route template and status.",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=LOCAL,
)
SSE_STREAMS = Gauge(
    "epochal_sse_streams",
    "Open Server-Sent Event streams.",
    registry=LOCAL,
    multiprocess_mode="livesum",
)
EVENT_POLLS = Counter(
    "epochal_event_polls",
    "Database reads made by the SSE poller (one per interval, however many streams).",
    registry=LOCAL,
)
JOB_PATH = re.compile(f"^/v1/jobs/({ID_PART})(?:/|$)")
# A submit's path has no id yet; its answer (JobPublic) starts with it.
JOB_IN_BODY = re.compile(rb'^\{"id":"(' + ID_PART.encode() + rb')"')


def escaped(text: str) -> str:
    """Control characters as \\xNN escapes: a CR/LF in a path cannot forge a log line."""
    if text.isprintable():  # the common case, in one C-level check
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def enable_multiprocess(workers: int) -> None:
    """Before uvicorn forks N workers: a fresh folder for their shared metric files."""
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        folder = tempfile.mkdtemp(prefix="epochal-prometheus-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder  # inherited by the worker processes
        atexit.register(shutil.rmtree, folder, ignore_errors=True)


def route_template(scope: Scope) -> str:
    """The matched route with its router prefixes ("/v1/jobs/{job_id}"), never the raw path."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if not template:
        return "unmatched"  # random 404 paths must not become label values
    try:
        filled = template.format(**scope.get("path_params", {}))
    except (KeyError, IndexError, ValueError):
        return str(template)
    path = scope.get("path", "")
    prefix = path[: -len(filled)] if filled and path.endswith(filled) else ""
    return prefix + template


class RequestMetrics:
    """Times each request by its route template, and logs it with the job id it concerns."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500
        match = JOB_PATH.match(scope.get("path", ""))
        job_id = match.group(1) if match else None
        streaming = scope.get("path", "").endswith("/events")

        async def timed_send(message: Message) -> None:
            nonlocal status, job_id
            if message["type"] == "http.response.start":
                status = message["status"]
                self._observe(scope, status, started)
            elif job_id is None and scope["method"] == "POST" and status < 300:
                found = JOB_IN_BODY.match(message.get("body", b""))
                job_id = found.group(1).decode() if found else None
            await send(message)

        with job_context(job_id):
            if streaming:
                SSE_STREAMS.inc()
            try:
                await self.app(scope, receive, timed_send)
            finally:
                if streaming:
                    SSE_STREAMS.dec()
                with job_context(job_id):
                    self._log(scope, status, started)

    @staticmethod
    def _observe(scope: Scope, status: int, started: float) -> None:
        route = route_template(scope)
        REQUEST_SECONDS.labels(scope["method"], route, str(status)).observe(
            time.perf_counter() - started
        )

    @staticmethod
    def _log(scope: Scope, status: int, started: float) -> None:
        client = scope.get("client") or ("-", 0)
        log.info(
            '%s - "%s %s" %s %.1fms',
            client[0],
            scope["method"],
            escaped(scope.get("path", "")),
            status,
            1000 * (time.perf_counter() - started),
        )
