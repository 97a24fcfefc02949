"""Logging for the API, the worker and the training child: text or JSON lines, with the job id.

EPOCHAL_LOG_JSON=1 turns every line into one JSON object: ts, level, logger, component, job_id,
msg (and exc for a traceback). The job id comes from the record's `extra`, else from the context
of the request or task being served (job_context), else from the process (the training child
serves one job for its whole life).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from app.core.config import get_settings

current_job: ContextVar[str | None] = ContextVar("epochal_job_id", default=None)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(component)s %(name)s [job %(job_id)s] %(message)s"


def json_enabled() -> bool:
    return get_settings().log_json


@contextmanager
def job_context(job_id: str | None) -> Iterator[None]:
    """Lines logged inside carry this job id (a no-op for None)."""
    if job_id is None:
        yield
        return
    token = current_job.set(job_id)
    try:
        yield
    finally:
        current_job.reset(token)


class JobFields(logging.Filter):
    """Adds `job_id` and `component` to every record that passes the handler."""

    def __init__(self, component: str, job_id: str | None = None) -> None:
        super().__init__()
        self.component, self.job_id = component, job_id

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "job_id", None):
            record.job_id = current_job.get() or self.job_id or "-"
        record.component = self.component
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        job_id = getattr(record, "job_id", "-")
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "component": getattr(record, "component", None),
            "job_id": None if job_id == "-" else job_id,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def make_handler(component: str, job_id: str | None = None) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(JobFields(component, job_id))
    handler.setFormatter(JsonFormatter() if json_enabled() else logging.Formatter(TEXT_FORMAT))
    return handler


def configure_logging(component: str, job_id: str | None = None, level: int = logging.INFO) -> None:
    """Route every logger through one handler on the root logger (replacing earlier ones)."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(make_handler(component, job_id))
    root.setLevel(level)


def uvicorn_log_config(component: str = "api") -> dict[str, Any]:
    """uvicorn's dictConfig: its loggers and ours share the handler above (access log is ours)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"job": {"()": JobFields, "component": component}},
        "formatters": {
            "text": {"format": TEXT_FORMAT},
            "json": {"()": JsonFormatter},
        },
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "filters": ["job"],
                "formatter": "json" if json_enabled() else "text",
            }
        },
        "root": {"handlers": ["default"], "level": "INFO"},
        "loggers": {
            "uvicorn": {"level": "INFO"},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"level": "WARNING"},
        },
    }
